"""The actor: steps a batch of envs with the agent and writes unrolls into shared slots.

As in the IMPALA seed's actor, env state, agent (LSTM) state and the last env/agent output
persist across unrolls: step 0 of each unroll repeats the last step of the previous one.
The actor knows nothing of transport: it writes through an `UnrollWriter` and acts through a
`Policy` (`gazelle.runtime.policy`: its own agent copy, or the central inference server),
both handed to it by a backend (one `Policy` per env group: see `Actor`). Telemetry does
not travel with the data: once per unroll it reports one "unroll" event (the episodes that
ended, with their level, return, length and the env's statistics of each; seconds per step
in each stage; the agent steps; how often each action was taken, for one discrete action
set) through `report`, so a dropped or stale unroll loses no statistic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from gazelle.models import Agent, build_agent
from gazelle.runtime.actor_spec import ActorSpec
from gazelle.runtime.env_group import EnvGroup, ObsEncoder
from gazelle.runtime.interfaces import UnrollWriter
from gazelle.runtime.policy import Policy

__all__ = ["Actor", "ActorSpec", "ObsEncoder", "actor_agent"]


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


class Actor:
    """Runs unrolls forever (until `should_stop()`), one `[T+1]` slot per env per unroll.

    With several policies (`--env-groups`, central inference), the envs are split into
    that many groups, each acting through its own policy: at every step each group takes
    its actions, steps its envs and sends its next request at once, so the server answers
    it while the other groups step theirs; an actor with one group waits for each round
    trip with its envs idle. A group's next request is sent at the end of an unroll too, so
    the wait overlaps the slot hand-over. Each env's data is the same whatever the groups.

    With `end_at_episode_end` (A3C's runner, as the A3C seed's partial rollouts), an unroll
    stops after the step t at which any env's episode ends: it fills indices 0..t only
    (`steps` is t, T otherwise), and the next one starts from that step."""

    #: Stop an unroll at the first episode end (see the class docstring).
    end_at_episode_end: bool = False

    def __init__(
        self,
        spec: ActorSpec,
        buffers: UnrollWriter,
        policy: Policy | Sequence[Policy],
        report: Callable[[dict[str, Any]], None] = lambda event: None,
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        """`policy`: one, or one per env group (`spec.env_groups`). `report` sends one
        telemetry or fault event; `beat` tells the backend the actor is alive (called at
        every step and while it waits), so a hung one can be found."""
        self.spec, self.buffers, self.report = spec, buffers, report
        self.beat = beat
        policies = [policy] if not isinstance(policy, Sequence) else list(policy)
        if len(policies) != spec.env_groups:
            raise ValueError(f"{len(policies)} policies for {spec.env_groups} env groups")
        self.encode = ObsEncoder(spec.obs_spec)
        self.groups = [
            EnvGroup(spec, p, lo, hi, self.encode)
            for p, (lo, hi) in zip(policies, spec.group_bounds())
        ]
        self.timing: tuple[float, ...] = (0.0, 0.0, 0.0)
        #: Steps of the last unroll (after its index 0): T, or fewer with end_at_episode_end.
        self.steps = 0

    @property
    def version(self) -> int:
        """The oldest weights' version that acted in the last unroll, over the groups."""
        return min(group.policy.version for group in self.groups)

    def _write(self, group: EnvGroup, slots: torch.Tensor, t: int) -> None:
        self.buffers.write_step(slots, t, group.last)
        self.buffers.write_step(slots, t, group.obs)

    @torch.inference_mode()
    def unroll(self, slot_ids: list[int]) -> None:
        """Fill the given slots with one unroll of every env."""
        spec = self.spec
        groups = [(group, torch.tensor(slot_ids[group.lo : group.hi])) for group in self.groups]
        clock = time.perf_counter
        inference_s = env_s = 0.0
        start = clock()
        episodes: list[tuple[float, int, dict[str, float]]] = []
        # why: a histogram of the actions of one discrete action set (none for others).
        scalar = spec.obs_spec.actions.is_scalar
        counts = torch.zeros(spec.obs_spec.actions.num_actions if scalar else 0, dtype=torch.int64)
        for group, slots in groups:
            group.policy.begin_unroll()
            self._write(group, slots, 0)  # why: index 0 repeats the previous unroll's last step
            # why: a request in flight was sent with this state, still the policy's until
            # its answer is received: the state at index 0 either way.
            self.buffers.write_state(slots, group.policy.state)
            if not group.in_flight:
                group.submit()
        ended = False
        for t in range(1, spec.unroll_length + 1):
            for group, slots in groups:
                self.beat()
                t0 = clock()
                out = group.receive()
                t1 = clock()
                step = group.envs.step(out.action.numpy())
                inference_s, env_s = inference_s + t1 - t0, env_s + clock() - t1
                for index, message in step.errors:
                    self.report(
                        {
                            "type": "env_error",
                            "actor": spec.actor_id,
                            "level": spec.level,
                            "env": group.lo + index,
                            "message": message,
                        }
                    )
                reward = torch.from_numpy(np.asarray(step.reward, dtype=np.float32))
                if scalar:
                    counts += torch.bincount(out.action, minlength=len(counts))
                for j in np.flatnonzero(np.asarray(step.game_over, dtype=bool)):
                    stats = step.episode_stats.get(int(j), {})
                    episodes.append(
                        (float(step.episode_return[j]), int(step.episode_length[j]), stats)
                    )
                group.last = {
                    "reward": reward,
                    "terminated": torch.from_numpy(np.asarray(step.terminated, dtype=bool)),
                    "truncated": torch.from_numpy(np.asarray(step.truncated, dtype=bool)),
                    "truncation_value": group.truncation_values(step, out, reward),
                    "action": out.action,
                    "baseline": out.baseline.float(),
                    "policy_logits": out.policy_logits.float(),
                }
                group.obs = self.encode(step.obs)
                self._write(group, slots, t)
                ended |= self.end_at_episode_end and bool(
                    (group.last["terminated"] | group.last["truncated"]).any()
                )
                # why: sent at once, so the server serves it while the other groups step.
                group.submit()
            self.steps = t
            if ended:
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
            self.buffers.commit(slots, spec.actor_id, spec.level_id, self.version)

    def close(self) -> None:
        for group in self.groups:
            group.envs.close()
