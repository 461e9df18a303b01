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
from gazelle.runtime.interfaces import InferenceClient, ParamSource, PolicyStopped
from gazelle.types import AgentOutput, AgentState

Obs = dict[str, torch.Tensor]

__all__ = ["CentralPolicy", "LocalPolicy", "Policy", "PolicyStopped"]


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

    def submit(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> None:
        """The first half of `step`: hand over its inputs (central: send the request).
        Until `receive`, `state` is still the state these inputs are stepped from."""

    def receive(self) -> AgentOutput:
        """The second half of `step`: the outputs of the submitted inputs; advances `state`.
        Local inference computes them here, so weights pulled in between are the ones used."""

    def values(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        """V(obs) `[K]` for the envs `index` `[K]` (inputs `[K, ...]`) from their current
        state, without advancing it: the value of a final obs cut by a time limit."""


class _StatefulPolicy:
    """`step` and `values` of both policies, over their one-call `_call`.

    `level`: the actor's level id, sent with every row when the agent keeps a value output
    per level (multi-task PopArt), so values (truncation bootstraps) are that level's.
    """

    state: AgentState
    level: int | None = None

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        raise NotImplementedError

    def _levels(self, count: int) -> torch.Tensor | None:
        """`[count]` copies of the actor's level id (None: a one-level value head)."""
        level = self.level
        return None if level is None else torch.full((count,), level, dtype=torch.int64)

    _inputs: tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def step(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> AgentOutput:
        self.submit(obs, last_action, reward, done)
        return self.receive()

    def submit(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> None:
        self._inputs = (obs, last_action, reward, done)

    def receive(self) -> AgentOutput:
        assert self._inputs is not None, "receive() without submit()"
        inputs, self._inputs = self._inputs, None
        out, self.state = self._call(*inputs, self.state)
        return out

    def values(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        state = tuple(s.index_select(0, index) for s in self.state)
        done = torch.zeros(len(index), dtype=torch.bool)
        out, _ = self._call(obs, last_action, reward, done, state)
        return out.baseline.float()


class LocalPolicy(_StatefulPolicy):
    """The actor's own agent copy; pulls weights from `params` at each unroll's start.

    With `lockstep_batch` (B, one actor only), unroll k of this policy waits until the
    learner has made every update the first k unrolls allow, `first version + k * E // B`
    (E envs): the weights each unroll acts with are then a function of k, not of timing, so
    a seeded run repeats exactly (the actor idles while the learner updates). `waiting()` is
    called while it waits (True: stop, raises `PolicyStopped`). After `lockstep_timeout_s`
    without that version (the learner skipped a non-finite update, which publishes nothing)
    it counts afresh from the version it has: the run goes on, no longer in step.
    """

    def __init__(
        self,
        agent: Agent,
        params: ParamSource,
        num_envs: int,
        lockstep_batch: int | None = None,
        waiting: Callable[[], bool] = lambda: False,
        lockstep_timeout_s: float = 30.0,
        level: int | None = None,
    ) -> None:
        self.agent, self.params = agent.eval(), params
        self.level = level
        self.state: AgentState = agent.initial_state(num_envs)
        self._version = -1
        self.num_envs, self.lockstep_batch = num_envs, lockstep_batch
        self.waiting, self.lockstep_timeout_s = waiting, lockstep_timeout_s
        self._unrolls, self._first_version = 0, -1

    @property
    def version(self) -> int:
        return self._version

    def begin_unroll(self) -> None:
        if self.lockstep_batch is not None and self._unrolls > 0:
            # why: after k unrolls (k * E slots) the learner can make at most k * E // B
            # updates, so waiting for exactly that many is never waiting for the impossible,
            # and the version pulled then is the same in every run.
            target = self._first_version + self._unrolls * self.num_envs // self.lockstep_batch
            if not self._wait_for(target):
                self._unrolls = 0  # why: count afresh, or every later unroll would wait too
        self._version = self.params.pull(self.agent, self._version)
        if self._unrolls == 0:
            self._first_version = self._version
        self._unrolls += 1

    def _wait_for(self, version: int) -> bool:
        """Wait until the learner has published `version`; False after the timeout."""
        start = time.monotonic()
        while self.params.current_version() < version:
            if self.waiting():
                raise PolicyStopped
            if time.monotonic() - start > self.lockstep_timeout_s:
                return False
            time.sleep(0.001)  # why: a learner update takes milliseconds at least
        return True

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        return self.agent.act(obs, last_action, reward, done, state, level=self._levels(len(done)))


class CentralPolicy(_StatefulPolicy):
    """Outputs from a central inference server through `client` (the seed's dynamic
    batching); the state stays here and travels with each request.

    The client raises `TimeoutError` when no answer comes in time (the actor then dies and
    is restarted) and `PolicyStopped` when the run stops while it waits.
    """

    def __init__(self, client: InferenceClient, num_envs: int, level: int | None = None) -> None:
        self.client, self.level = client, level
        size = client.state_size
        self.state: AgentState = (
            (torch.zeros(num_envs, size), torch.zeros(num_envs, size)) if size else ()
        )
        self._version: int | None = None

    @property
    def version(self) -> int:
        return -1 if self._version is None else self._version

    def begin_unroll(self) -> None:
        self._version = None

    def _request(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> dict[str, torch.Tensor]:
        inputs = {**obs, "last_action": last_action, "reward": reward, "done": done}
        if state:
            inputs["state_h"], inputs["state_c"] = state
        levels = self._levels(len(done))
        if levels is not None:
            inputs["level"] = levels
        return inputs

    def _answer(
        self, response: dict[str, torch.Tensor], version: int, stateful: bool
    ) -> tuple[AgentOutput, AgentState]:
        out = AgentOutput(response["action"], response["policy_logits"], response["baseline"])
        new_state: AgentState = (response["state_h"], response["state_c"]) if stateful else ()
        # why: the server may swap weights between two steps of an unroll; the oldest
        # version that produced an output is the honest policy lag.
        self._version = version if self._version is None else min(self._version, version)
        return out, new_state

    def _call(
        self,
        obs: Obs,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        state: AgentState,
    ) -> tuple[AgentOutput, AgentState]:
        inputs = self._request(obs, last_action, reward, done, state)
        return self._answer(*self.client.infer(inputs, len(done)), bool(state))

    def submit(
        self, obs: Obs, last_action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor
    ) -> None:
        # why: the request goes now, so the server can serve it while the actor steps its
        # other env groups; `state` stays the one it was sent with until `receive`.
        self.client.submit(self._request(obs, last_action, reward, done, self.state), len(done))

    def receive(self) -> AgentOutput:
        out, self.state = self._answer(*self.client.receive(), bool(self.state))
        return out
