"""The A3C seed's runner design with gazelle's actor: the runner thread is `Runner`, the
runtime's `Actor`, writing its partial rollouts through `QueueWriter` into a bounded
in-process queue; the trainer takes one and appends what else is waiting until an episode
end (`pull_rollouts`, the seed's `pull_batch_from_queue`).

A rollout is a dict of time-major tensors `[T+1, E]` (E envs stepped by one worker), index 0
repeating the previous rollout's last step, with `state_h` / `state_c` `[E, H]`: the
LSTM state at its start (the seed's `features`), exactly IMPALA's unroll layout, so one
loss-side pairing serves both. `baseline[t+1]` is the runner's `V(x_t)` (the seed's
`rollout.values`); with `record_bootstrap`, `bootstrap` `[E]` is its `V(x_T)` after the last
step (the seed's `rollout.r`). With `end_at_episode_end` a rollout stops at the step that
ends an episode: `[t+1, E]`, `t <= T` (the seed's partial rollout ending at its terminal).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

import torch

from gazelle.backends.local.layout import SlotLayout, is_state
from gazelle.models import state_size
from gazelle.runtime.actor import Actor
from gazelle.types import ObsSpec

Rollout = dict[str, torch.Tensor]


class QueueWriter:
    """An `UnrollWriter` for one actor in this process: each unroll is written into fresh
    tensors and, once committed, put in `rollouts` (bounded: the runner waits, checking
    `should_stop`, while the trainer is behind, as the seed's runner blocks on its queue)."""

    def __init__(
        self, spec: ObsSpec, unroll_length: int, num_envs: int, use_lstm: bool, maxsize: int
    ) -> None:
        self.spec, self.steps, self.num_envs = spec, unroll_length + 1, num_envs
        self.state_size = state_size(use_lstm)
        self.rollouts: queue.Queue[Rollout] = queue.Queue(maxsize=maxsize)
        self._current: Rollout = {}
        self._last_t = 0  # the last index written in the current rollout
        self._should_stop: Callable[[], bool] = lambda: False

    def _fresh(self) -> Rollout:
        n = self.num_envs
        layout = SlotLayout(self.steps - 1, self.spec, self.state_size)
        out = {}
        for name, (shape, dtype) in layout.field_shapes().items():
            # why: a slot's step fields are [T+1, ...]; a rollout puts the envs after time.
            dims = (n, *shape) if is_state(name) else (shape[0], n, *shape[1:])
            out[name] = torch.zeros(dims, dtype=dtype)
        return out

    def acquire(
        self, actor_id: int, count: int, timeout: float, should_stop: Callable[[], bool]
    ) -> list[int]:
        if should_stop():
            return []
        self._should_stop = should_stop
        self._current = self._fresh()
        self._last_t = 0
        return list(range(count))

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        self._last_t = max(self._last_t, t)
        for name, value in values.items():
            if name in self._current:
                self._current[name][t, slots] = value

    def write_bootstrap(self, values: torch.Tensor) -> None:
        """The runner's `V(x_T)` `[E]` after the rollout's last step."""
        self._current["bootstrap"] = values.float().clone()

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        if state:
            self._current["state_h"][slots] = state[0]
            self._current["state_c"][slots] = state[1]

    def commit(self, slots: list[int], actor_id: int, level_id: int, version: int) -> None:
        # why: an unroll that ended early (end_at_episode_end) wrote indices 0..t only.
        steps = self._last_t + 1
        rollout = {
            name: value[:steps] if name not in _PER_ROLLOUT else value
            for name, value in self._current.items()
        }
        rollout["policy_version"] = torch.tensor(version)
        while True:
            try:
                # why: short waits, so a stop is seen while the trainer is behind.
                self.rollouts.put(rollout, timeout=0.1)
                return
            except queue.Full:
                if self._should_stop():
                    return


#: Fields with no time dim: one value per rollout (per env).
_PER_ROLLOUT = ("state_h", "state_c", "bootstrap", "policy_version")


class Runner(Actor):
    """The seed's `RunnerThread`: gazelle's `Actor`, with the seed's two habits when asked:
    rollouts that end at an episode's end (`end_at_episode_end`), and `V(x_T)` of the
    policy that acted, recorded after each rollout's last step (`record_bootstrap`)."""

    buffers: QueueWriter

    def __init__(
        self, *args: Any, end_at_episode_end: bool, record_bootstrap: bool, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.end_at_episode_end = end_at_episode_end
        self.record_bootstrap = record_bootstrap

    @torch.inference_mode()
    def unroll(self, slot_ids: list[int]) -> None:
        super().unroll(slot_ids)
        if not self.record_bootstrap:
            return
        # why: the policy's state is now the one after x_{T-1}, so this is V(x_T) from the
        # state the next step would use (the seed's `policy.value(last_state, *features)`),
        # with the weights that acted; where x_T starts an episode, the loss ignores it.
        (group,) = self.groups  # why: A3C's workers act with their own network: one group
        index = torch.arange(self.spec.envs_per_actor)
        values = group.policy.values(group.obs, group.last["action"], group.last["reward"], index)
        self.buffers.write_bootstrap(values)


def _ended(rollout: Rollout) -> bool:
    """Whether an episode ended in this rollout (index 0 repeats the previous one)."""
    return bool((rollout["terminated"][1:] | rollout["truncated"][1:]).any())


def join(rollouts: list[Rollout]) -> Rollout:
    """Consecutive rollouts of the same envs as one: `[1 + sum T_i, E]`, the first's state,
    the last's bootstrap.

    why: index 0 of each later rollout repeats the last step of the one before; it is
    dropped so every step appears once.
    """
    first = rollouts[0]
    out: Rollout = {}
    for name, value in first.items():
        if name == "bootstrap":
            out[name] = rollouts[-1][name]  # why: V(x_T) after the last one's last step
        elif name in _PER_ROLLOUT:
            out[name] = value
        else:
            out[name] = torch.cat([value] + [r[name][1:] for r in rollouts[1:]], dim=0)
    out["policy_version"] = torch.stack([r["policy_version"] for r in rollouts]).min()
    return out


def pull_rollouts(
    rollouts: queue.Queue[Rollout], should_stop: Callable[[], bool], timeout: float = 600.0
) -> Rollout | None:
    """The seed's `pull_batch_from_queue`: one rollout (waiting for it), then whatever is
    already waiting, until one of them ends an episode. None once `should_stop()`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            taken = [rollouts.get(timeout=0.1)]
            break
        except queue.Empty:
            if should_stop():
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no rollout from the runner thread in {timeout:.0f} s"
                ) from None
    while not _ended(taken[-1]):
        try:
            taken.append(rollouts.get_nowait())
        except queue.Empty:
            break
    return join(taken) if len(taken) > 1 else taken[0]
