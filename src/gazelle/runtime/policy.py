"""How an actor gets its agent outputs: its own agent copy, or the central inference server.

Both policies hold the LSTM state of the actor's E envs (`state`, `(h, c)` each `[E, H]`, or
`()`), advance it in `step`, and report the oldest weights' `version` that produced an
output since `begin_unroll` (the version recorded with the unroll: with local inference
the one pulled at the unroll's start; with central inference the server may swap weights
between two steps, as in the seed's dynamic batching, and the oldest one is the honest
policy lag).

The state stays with the actor in both cases. With central inference it travels with each
request (`[E, H]` twice, small next to the frames) instead of living on the server: the
actor then has the state at the start of each unroll to store in its slot without asking,
the server keeps nothing per actor, and a restarted actor starts from a fresh state without
any reset message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch

from gazelle.models import Agent
from gazelle.runtime.inference import InferenceChannels
from gazelle.runtime.params import ParamStore
from gazelle.types import AgentOutput, AgentState

Obs = dict[str, torch.Tensor]


class PolicyStopped(Exception):
    """The run is stopping while the actor waited for the server."""


class Policy(Protocol):
    state: AgentState

    @property
    def version(self) -> int: ...

    def begin_unroll(self) -> None:
        """Called before each unroll (local: pull new weights; both: reset `version`)."""

    def step(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> AgentOutput:
        """Outputs `[E, ...]` for all envs' inputs `[E, ...]`; advances `state`."""

    def values(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        """V(obs) `[K]` for the envs `index` `[K]` (inputs `[K, ...]`) from their current
        state, without advancing it: the value of a final obs cut by a time limit."""


class _StatefulPolicy:
    """`step` and `values` of both policies, over their one-call `_call`."""

    state: AgentState

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        raise NotImplementedError

    def step(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> AgentOutput:
        out, self.state = self._call(obs, last_action, reward, done, self.state)
        return out

    def values(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        state = tuple(s.index_select(0, index) for s in self.state)
        done = torch.zeros(len(index), dtype=torch.bool)
        out, _ = self._call(obs, last_action, reward, done, state)
        return out.baseline.float()


class LocalPolicy(_StatefulPolicy):
    """The actor's own agent copy; pulls weights from `params` at each unroll's start."""

    def __init__(self, agent: Agent, params: ParamStore, num_envs: int) -> None:
        self.agent, self.params = agent.eval(), params
        self.state: AgentState = agent.initial_state(num_envs)
        self._version = -1

    @property
    def version(self) -> int:
        return self._version

    def begin_unroll(self) -> None:
        self._version = self.params.pull(self.agent, self._version)

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        return self.agent.act(obs, last_action, reward, done, state)


class CentralPolicy(_StatefulPolicy):
    """A client of the `InferenceServer`: one request in flight through actor `actor_id`'s
    slot of `channels`.

    Raises `TimeoutError` when no answer comes within `timeout_s` (the actor then dies and
    is restarted), `PolicyStopped` when `should_stop()` turns true while waiting.
    """

    def __init__(
        self,
        channels: InferenceChannels,
        actor_id: int,
        num_envs: int,
        should_stop: Callable[[], bool] = lambda: False,
        timeout_s: float = 120.0,
    ) -> None:
        self.channels, self.actor_id = channels, actor_id
        self.should_stop, self.timeout_s = should_stop, timeout_s
        size = channels.request["state_h"].shape[-1] if channels.has_state else 0
        self.state: AgentState = (
            (torch.zeros(num_envs, size), torch.zeros(num_envs, size)) if size else ()
        )
        # why: continue the slot's sequence numbers, so a response to a request of a dead
        # predecessor in this slot is never mistaken for one of ours.
        self.seq = int(channels.request_seq[actor_id])
        self._version: int | None = None

    @property
    def version(self) -> int:
        return -1 if self._version is None else self._version

    def begin_unroll(self) -> None:
        self._version = None

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        channels, actor = self.channels, self.actor_id
        count = len(done)
        inputs = {**obs, "last_action": last_action, "reward": reward, "done": done}
        if state:
            inputs["state_h"], inputs["state_c"] = state
        for name, value in inputs.items():
            channels.request[name][actor, :count] = value
        channels.count[actor] = count
        self.seq += 1
        # why: the sequence number is written after the rows and before the signal, so the
        # server never serves rows older than the number it answers with.
        channels.request_seq[actor] = self.seq
        channels.wake.release()
        deadline = time.monotonic() + self.timeout_s
        while int(channels.response_seq[actor]) != self.seq:
            if self.should_stop():
                raise PolicyStopped
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"actor {actor}: no answer from the inference server in {self.timeout_s:.0f}s"
                )
            # why: short waits, so a stop is seen quickly; a stale signal (for a request of
            # a dead predecessor) just loops once more.
            channels.ready[actor].acquire(timeout=0.1)
        response = channels.response
        out = AgentOutput(
            response["action"][actor, :count].clone(),
            response["policy_logits"][actor, :count].clone(),
            response["baseline"][actor, :count].clone(),
        )
        new_state: AgentState = ()
        if state:
            new_state = (
                response["state_h"][actor, :count].clone(),
                response["state_c"][actor, :count].clone(),
            )
        version = int(channels.version[actor])
        self._version = version if self._version is None else min(self._version, version)
        return out, new_state
