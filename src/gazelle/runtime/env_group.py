"""An actor's envs, in groups: how they are made, how their observations become the agent's
tensors, and one group's persistent last step (`EnvGroup`), for `gazelle.runtime.actor`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gazelle.runtime.actor_spec import ActorSpec
from gazelle.runtime.policy import Policy
from gazelle.types import TEXT, AgentOutput, ObsSpec


def make_env_batch(spec: ActorSpec, lo: int = 0, hi: int | None = None) -> Any:
    """The actor's envs `lo..hi-1` (all by default), env j seeded `spec.seed + j`."""
    from gazelle.envs import make
    from gazelle.envs.batch import SerialEnvs
    from gazelle.envs.registry import make_resolved

    maker: Callable[..., Any] = make
    if spec.env_target is not None:
        maker = functools.partial(make_resolved, spec.env_target)
    fns = [
        functools.partial(maker, spec.level, seed=spec.seed + j, **spec.env_kwargs)
        for j in range(lo, spec.envs_per_actor if hi is None else hi)
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


class EnvGroup:
    """Envs `lo..hi-1` of an actor, with the policy that acts for them and their persistent
    last step (index 0 of the next unroll, as in the seed's actor)."""

    def __init__(self, spec: ActorSpec, policy: Policy, lo: int, hi: int, encode: Any) -> None:
        self.policy, self.lo, self.hi, self.encode = policy, lo, hi, encode
        self.envs = make_env_batch(spec, lo, hi)
        num_envs = hi - lo
        #: A step's inputs are with the policy and its outputs not yet taken (`submit`).
        self.in_flight = False
        self.obs = encode(self.envs.reset())
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

    def submit(self) -> None:
        """Send the next step's inputs (the last step's obs, action, reward and end)."""
        last = self.last
        done = last["terminated"] | last["truncated"]
        self.policy.submit(self.obs, last["action"], last["reward"], done)
        self.in_flight = True

    def receive(self) -> AgentOutput:
        """The outputs of the step sent last, `[hi - lo, ...]`."""
        self.in_flight = False
        return self.policy.receive()

    def truncation_values(self, step: Any, out: Any, reward: torch.Tensor) -> torch.Tensor:
        """V(last obs) of episodes cut by a time limit (0 elsewhere): the loss bootstraps it."""
        values = torch.zeros(self.hi - self.lo)
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
        # why: the policy's state is the one after the step that led to the final obs; no
        # request of this group is in flight here (it was received, the next not sent).
        values[index] = self.policy.values(
            self.encode(obs),
            out.action.index_select(0, index),
            reward.index_select(0, index),
            index,
        )
        return values
