"""The actor: steps a batch of envs with the agent and writes unrolls into shared slots.

As in the IMPALA seed's actor, env state, agent (LSTM) state and the last env/agent output
persist across unrolls: step 0 of each unroll repeats the last step of the previous one.
The actor knows nothing of transport: it writes through an `UnrollWriter` and acts through a
`Policy` (`gazelle.runtime.policy`: its own agent copy, or the central inference server),
both handed to it by a backend. Telemetry does not travel with the data: once per unroll it
reports one "unroll" event (the episodes that ended, with their level, return, length and
the env's statistics of each; seconds per step in each stage; the agent steps; how often
each action was taken, for one discrete action set) through `report`, so a dropped or
stale unroll loses no statistic.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gazelle.models import Agent, build_agent
from gazelle.runtime.interfaces import UnrollWriter
from gazelle.runtime.policy import Policy
from gazelle.types import TEXT, ObsSpec

if TYPE_CHECKING:
    from gazelle.envs.registry import Resolved


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs to build its envs and agent (picklable)."""

    actor_id: int
    level: str
    level_id: int
    envs_per_actor: int
    unroll_length: int
    obs_spec: ObsSpec
    torso: str
    use_lstm: bool
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    slot_timeout_s: float = 600.0
    response_timeout_s: float = 120.0
    #: Batch size B when the actor acts in lockstep with the learner (one actor, local
    #: inference: exact repeats of a seeded run; see `LocalPolicy`); None: free-running.
    lockstep_batch: int | None = None
    #: The agent's core gets the last reward and action too (`gazelle.models.Agent`).
    last_action_reward: bool = True
    #: The agent's value outputs: one per level with multi-task PopArt, else 1.
    num_levels: int = 1
    #: The model's options (`ModelConfig.agent_options`: activation, background, log-stds,
    #: observation normalisation), as `gazelle.models.build_agent` takes them.
    agent_options: dict[str, Any] = field(default_factory=dict)
    #: How Gaussian actions reach a Box's bounds (`gazelle.actions`): clip | tanh.
    action_bounds: str = "clip"
    #: What `level` resolved to when the run probed its env (`EnvProbe.target`), so the
    #: actor makes its envs without resolving the spec again; None: resolve it here.
    env_target: Resolved | None = None

    @property
    def value_level(self) -> int | None:
        """The level id to send with each row (None: a one-level value head)."""
        return self.level_id if self.num_levels > 1 else None


def actor_agent(spec: ActorSpec) -> Agent:
    """The actor's own copy of the agent (weights come from the learner)."""
    return build_agent(
        spec.obs_spec,
        spec.torso,
        spec.use_lstm,
        last_action_reward=spec.last_action_reward,
        num_levels=spec.num_levels,
        **spec.agent_options,
    )


def make_env_batch(spec: ActorSpec) -> Any:
    from gazelle.envs import make
    from gazelle.envs.batch import SerialEnvs
    from gazelle.envs.registry import make_resolved

    maker: Callable[..., Any] = make
    if spec.env_target is not None:
        maker = functools.partial(make_resolved, spec.env_target)
    fns = [
        functools.partial(maker, spec.level, seed=spec.seed + j, **spec.env_kwargs)
        for j in range(spec.envs_per_actor)
    ]
    return SerialEnvs(fns, action_bounds=spec.action_bounds)


class ObsEncoder:
    """Batched env obs -> the agent's obs tensors, for the fields of `spec` only (a key the
    spec withholds is dropped): arrays copied into tensors of the field's dtype, text
    hashed into token ids `[N, TEXT_TOKENS]` (`gazelle.models.tokenize`)."""

    def __init__(self, spec: ObsSpec) -> None:
        from gazelle.models import tokenize

        self.arrays = [(f.name, f.dtype) for f in spec.fields if f.kind != TEXT]
        self.texts = {f.name: f.shape[0] for f in spec.fields if f.kind == TEXT}
        self._tokens = functools.lru_cache(maxsize=4096)(
            lambda text, n: torch.from_numpy(tokenize([text], max_tokens=n)[0])
        )

    def __call__(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        # why: copy, since env batches hand out read-only views of their own memory.
        out = {name: torch.tensor(np.asarray(obs[name], dtype)) for name, dtype in self.arrays}
        for name, tokens in self.texts.items():
            out[name] = torch.stack([self._tokens(text, tokens) for text in obs[name]])
        return out


class Actor:
    """Runs unrolls forever (until `should_stop()`), one `[T+1]` slot per env per unroll.

    With `end_at_episode_end` (A3C's runner, as the A3C seed's partial rollouts), an unroll
    stops after the step t at which any env's episode ends: it fills indices 0..t only
    (`steps` is t, T otherwise), and the next one starts from that step."""

    #: Stop an unroll at the first episode end (see the class docstring).
    end_at_episode_end: bool = False

    def __init__(
        self,
        spec: ActorSpec,
        buffers: UnrollWriter,
        policy: Policy,
        report: Callable[[dict[str, Any]], None] = lambda event: None,
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        """`report` sends one telemetry or fault event; `beat` tells the backend the actor
        is alive (called at every step and while it waits), so a hung one can be found."""
        self.spec, self.buffers, self.policy, self.report = spec, buffers, policy, report
        self.beat = beat
        self.envs = make_env_batch(spec)
        self.encode = ObsEncoder(spec.obs_spec)
        self.timing: tuple[float, ...] = (0.0, 0.0, 0.0)
        #: Steps of the last unroll (after its index 0): T, or fewer with end_at_episode_end.
        self.steps = 0
        num_envs = spec.envs_per_actor
        # The persistent "last step" (index 0 of the next unroll), as in the seed's actor.
        self.obs = self.encode(self.envs.reset())
        self.last: dict[str, torch.Tensor] = {
            "reward": torch.zeros(num_envs),
            "terminated": torch.zeros(num_envs, dtype=torch.bool),
            # why: the first obs starts an episode; marking it truncated resets the agent
            # state (already initial) and keeps the loss from bootstrapping across it.
            "truncated": torch.ones(num_envs, dtype=torch.bool),
            "truncation_value": torch.zeros(num_envs),
            "action": torch.from_numpy(spec.obs_spec.actions.zeros(num_envs)),
            "baseline": torch.zeros(num_envs),
            "policy_logits": torch.zeros(num_envs, spec.obs_spec.actions.num_params),
        }

    def _write(self, slots: torch.Tensor, t: int) -> None:
        self.buffers.write_step(slots, t, self.last)
        self.buffers.write_step(slots, t, self.obs)

    def _truncation_values(self, step: Any, out: Any, reward: torch.Tensor) -> torch.Tensor:
        """V(last obs) of episodes cut by a time limit (0 elsewhere): the loss bootstraps it."""
        values = torch.zeros(self.spec.envs_per_actor)
        cut = [j for j in step.final_obs if step.truncated[j] and not step.terminated[j]]
        if not cut:
            return values
        finals = [step.final_obs[j] for j in cut]
        obs: dict[str, Any] = {
            k: [f[k] for f in finals]
            if k in self.encode.texts
            else np.stack([f[k] for f in finals])
            for k in finals[0]
        }
        index = torch.tensor(cut)
        # why: the policy's state is the one after the step that led to the final obs.
        values[index] = self.policy.values(
            self.encode(obs),
            out.action.index_select(0, index),
            reward.index_select(0, index),
            index,
        )
        return values

    @torch.inference_mode()
    def unroll(self, slot_ids: list[int]) -> None:
        """Fill the given slots with one unroll of every env."""
        spec = self.spec
        slots = torch.tensor(slot_ids)
        clock = time.perf_counter
        inference_s = env_s = 0.0
        start = clock()
        episodes: list[tuple[float, int, dict[str, float]]] = []
        # why: a histogram of the actions of one discrete action set (none for others).
        scalar = spec.obs_spec.actions.is_scalar
        counts = torch.zeros(spec.obs_spec.actions.num_actions if scalar else 0, dtype=torch.int64)
        self.policy.begin_unroll()
        self._write(slots, 0)  # why: index 0 repeats the previous unroll's last step
        self.buffers.write_state(slots, self.policy.state)
        for t in range(1, spec.unroll_length + 1):
            self.beat()
            t0 = clock()
            done = self.last["terminated"] | self.last["truncated"]
            out = self.policy.step(self.obs, self.last["action"], self.last["reward"], done)
            t1 = clock()
            step = self.envs.step(out.action.numpy())
            inference_s, env_s = inference_s + t1 - t0, env_s + clock() - t1
            for index, message in step.errors:
                self.report(
                    {
                        "type": "env_error",
                        "actor": spec.actor_id,
                        "level": spec.level,
                        "env": index,
                        "message": message,
                    }
                )
            reward = torch.from_numpy(np.asarray(step.reward, dtype=np.float32))
            if scalar:
                counts += torch.bincount(out.action, minlength=len(counts))
            for j in np.flatnonzero(np.asarray(step.game_over, dtype=bool)):
                stats = step.episode_stats.get(int(j), {})
                episodes.append((float(step.episode_return[j]), int(step.episode_length[j]), stats))
            self.last = {
                "reward": reward,
                "terminated": torch.from_numpy(np.asarray(step.terminated, dtype=bool)),
                "truncated": torch.from_numpy(np.asarray(step.truncated, dtype=bool)),
                "truncation_value": self._truncation_values(step, out, reward),
                "action": out.action,
                "baseline": out.baseline.float(),
                "policy_logits": out.policy_logits.float(),
            }
            self.obs = self.encode(step.obs)
            self._write(slots, t)
            self.steps = t
            if self.end_at_episode_end and bool(
                (self.last["terminated"] | self.last["truncated"]).any()
            ):
                break
        per_step = 1.0 / (self.steps * spec.envs_per_actor)
        total = clock() - start
        self.timing = (
            inference_s * per_step,
            env_s * per_step,
            (total - inference_s - env_s) * per_step,
        )
        self.report(
            {
                "type": "unroll",
                "actor": spec.actor_id,
                "level_id": spec.level_id,
                "episodes": episodes,
                "timing": self.timing,
                "action_counts": counts.tolist(),
                "steps": self.steps * spec.envs_per_actor,
            }
        )

    def run(self, should_stop: Callable[[], bool]) -> None:
        spec = self.spec

        def stopping() -> bool:
            # why: waiting for a free slot (a slow learner) is not hanging: beat meanwhile.
            self.beat()
            return should_stop()

        while not should_stop():
            slots = self.buffers.acquire(
                spec.actor_id, spec.envs_per_actor, spec.slot_timeout_s, stopping
            )
            if not slots:
                return
            self.unroll(slots)
            self.buffers.commit(slots, spec.actor_id, spec.level_id, self.policy.version)

    def close(self) -> None:
        self.envs.close()
