"""What a Ray fleet's pump thread hands the learner's thread: finished unrolls, how many
each actor holds, the events since the last poll, and the pump's failure.

The pump (`gazelle.backends.ray.fleet`) puts each finished unroll here, one entry per env,
and counts an actor's calls against its slots; the learner takes `batch_size` entries at a
time as one time-major batch. Everything here is guarded by one condition, so the two
threads never see a half-updated count.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from gazelle.backends.local.layout import is_state


class UnrollQueue:
    """Finished unrolls and per-actor slot counts for `actors` actors.

    Args:
        actors: the fleet's number of actors (indices `0 .. actors - 1`).
        index_of: an unroll's actor index from its result (by its `meta["actor_id"]`).
    """

    def __init__(self, actors: int, index_of: Callable[[dict[str, Any]], int]) -> None:
        self._index_of = index_of
        # why: one condition guards all of this: the pump thread writes, the learner's
        # thread takes, the loop's thread polls events.
        self._cond = threading.Condition()
        self._ready: collections.deque[tuple[dict[str, Any], int]] = collections.deque()
        self._held = [0] * actors  # per actor: env unrolls outstanding or not yet taken
        self._events: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self.dropped_slots = 0
        self.unrolls_in = 0

    def has_room(self, index: int, envs: int, calls: int) -> bool:
        """May actor `index` (with `envs` envs) get one more call, `calls` per env at most?"""
        with self._cond:
            return self._held[index] + envs <= envs * calls

    def hold(self, index: int, envs: int) -> None:
        """A call went out to actor `index`: its `envs` slots are held until taken."""
        with self._cond:
            self._held[index] += envs

    def drop(self, index: int, slots: int) -> None:
        """Actor `index`'s calls holding `slots` slots were lost (it was replaced)."""
        with self._cond:
            self._held[index] -= slots
            self.dropped_slots += slots

    def put(self, result: dict[str, Any], envs: int) -> None:
        """One call's result: its `envs` env unrolls and its events."""
        with self._cond:
            self.unrolls_in += envs
            self._events += result["events"]
            self._ready.extend((result, j) for j in range(envs))
            self._cond.notify_all()

    def add_events(self, *events: dict[str, Any] | None) -> None:
        with self._cond:
            self._events += [event for event in events if event is not None]

    def take_events(self) -> list[dict[str, Any]]:
        with self._cond:
            events, self._events = self._events, []
        return events

    def fail(self, error: BaseException) -> None:
        """The pump failed: wake the learner, which stops taking batches."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    @property
    def error(self) -> BaseException | None:
        with self._cond:
            return self._error

    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool]
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Time-major batches `[T+1, B, ...]` of `batch_size` env unrolls until
        `should_stop()` or the pump fails; TimeoutError after `timeout` s without one."""
        while True:
            deadline = time.monotonic() + timeout
            with self._cond:
                while len(self._ready) < batch_size:
                    if should_stop() or self._error is not None:
                        return
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"learner: no unroll from any actor in {timeout:.0f}s")
                    self._cond.wait(0.1)
                taken = [self._ready.popleft() for _ in range(batch_size)]
                for result, _ in taken:
                    self._held[self._index_of(result)] -= 1
            yield assemble(taken)

    def clear(self) -> None:
        """Forget every unroll (they may hold Ray object-store buffers)."""
        with self._cond:
            self._ready.clear()


def assemble(taken: list[tuple[dict[str, Any], int]]) -> dict[str, torch.Tensor]:
    """Per-env unrolls -> one batch: step fields `[T+1, B, ...]`, state `[B, H]`, metadata
    `[B]` (numpy concatenation: one copy, out of Ray's read-only buffers)."""
    first = taken[0][0]["data"]
    batch: dict[str, torch.Tensor] = {}
    for name in first:
        if is_state(name):
            parts = [result["data"][name][j : j + 1] for result, j in taken]
            batch[name] = torch.from_numpy(np.concatenate(parts, axis=0))
        else:
            parts = [result["data"][name][:, j : j + 1] for result, j in taken]
            batch[name] = torch.from_numpy(np.concatenate(parts, axis=1))
    for key in ("policy_version", "level_id", "actor_id"):
        values = [result["meta"][key] for result, _ in taken]
        dtype = torch.int64 if key == "policy_version" else torch.int32
        batch[key] = torch.tensor(values, dtype=dtype)
    return batch
