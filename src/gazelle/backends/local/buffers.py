"""Preallocated shared-memory unroll slots; only slot indices travel, through a pipe per actor.

One slot holds one env's unroll, `[T+1, ...]` per field, plus the agent state at its start
and its metadata (actor id, level id, policy version). Storage is time-major,
`[T+1, num_slots, ...]`: an actor writes step `t` of all its envs in one indexed copy, and
the learner's gather of B slots is directly the contiguous `[T+1, B, ...]` batch it trains
on. Each actor owns a fixed set of slots (`envs_per_actor * slots_per_env`), so a crashed
actor can only ever leave *its own* slots half-written, and the supervisor frees exactly
those.

Slot life cycle (one int per slot in shared memory):

    FREE --actor--> WRITING --actor--> READY --learner--> FREE
                      |                                 ^
                      +---- supervisor (actor died) ----+

An actor commits by flipping its slots to READY and sending their indices through its own
pipe (`gazelle.backends.local.channels`: one writer, atomic messages, no lock a dying actor
could hold); the learner waits on all actors' pipes. When an actor dies, the supervisor
frees its WRITING slots, closes its pipe (with whatever indices were in flight) and queues
its READY slots itself, so each READY slot reaches the learner exactly once, and a
half-written slot never does. The learner still checks that a slot is READY before taking it.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import connection
from typing import Any

import torch

from gazelle.backends.local.channels import Sender, receive_all
from gazelle.backends.local.layout import (
    SlotLayout,
    is_state,
)

FREE, WRITING, READY = 0, 1, 2


class UnrollBuffers:
    """`num_slots` unroll slots in shared memory, shared by actors (write) and learner (read).

    Create in the main process, pass to actor processes (torch shares the storage).
    """

    def __init__(self, layout: SlotLayout, num_actors: int, slots_per_actor: int, ctx: Any):
        self.layout = layout
        self.num_actors = num_actors
        self.slots_per_actor = slots_per_actor
        num_slots = num_actors * slots_per_actor
        self.data: dict[str, torch.Tensor] = {}
        for name, (shape, dtype) in layout.field_shapes().items():
            # why: time-major storage `[T+1, num_slots, ...]` (see module docstring); the
            # initial state has no time axis: `[num_slots, H]`.
            full = (num_slots, *shape) if is_state(name) else (shape[0], num_slots, *shape[1:])
            self.data[name] = torch.zeros(full, dtype=dtype).share_memory_()
        self.state = torch.zeros(num_slots, dtype=torch.int8).share_memory_()
        self.actor_id = torch.zeros(num_slots, dtype=torch.int32).share_memory_()
        self.level_id = torch.zeros(num_slots, dtype=torch.int32).share_memory_()
        self.policy_version = torch.zeros(num_slots, dtype=torch.int64).share_memory_()
        self._ctx = ctx
        # Learner side (not sent to actors): each actor's pipe, indices queued by the
        # supervisor, and a lock, since the supervisor (loop thread) and `take` (prefetch
        # thread) both touch them.
        self._readers: dict[int, connection.Connection] = {}
        self._pending: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()
        # Actor side: this process's end of its pipe (`attach`).
        self._sender: Sender | None = None

    def __getstate__(self) -> dict[str, Any]:
        # why: actors get the shared tensors; pipes are handed to each one explicitly.
        state = dict(self.__dict__)
        for name in ("_ctx", "_readers", "_pending", "_lock", "_sender"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._ctx, self._readers, self._sender = None, {}, None
        self._pending, self._lock = collections.deque(), threading.Lock()

    def open_channel(self, actor_id: int) -> Any:
        """A new pipe for (a new process of) actor `actor_id`; returns the writer's end to
        hand to it. The previous pipe of that actor, if any, is closed with its contents."""
        reader, writer = self._ctx.Pipe(duplex=False)
        with self._lock:
            old = self._readers.pop(actor_id, None)
            self._readers[actor_id] = reader
        if old is not None:
            old.close()
        return writer

    def attach(self, writer: Any) -> None:
        """In the actor's process: commit through this pipe end (from `open_channel`)."""
        self._sender = Sender(writer)

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        """Write step `t` of the given slots: each value `[len(slots), ...]`."""
        for name, value in values.items():
            self.data[name][t, slots] = value

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        """The agent state `(h, c)`, each `[len(slots), H]`, at the start of the unroll."""
        if state:
            self.data["state_h"][slots] = state[0]
            self.data["state_c"][slots] = state[1]

    @property
    def num_slots(self) -> int:
        return int(self.state.numel())

    def actor_slots(self, actor_id: int) -> range:
        start = actor_id * self.slots_per_actor
        return range(start, start + self.slots_per_actor)

    # ---- actor side -------------------------------------------------------------------
    def acquire(self, actor_id: int, count: int, timeout: float, should_stop: Any) -> list[int]:
        """Claim `count` FREE slots of this actor (marks them WRITING); waits for the learner.

        Raises TimeoutError after `timeout` seconds; returns [] if `should_stop()` turns true.
        """
        deadline = time.monotonic() + timeout
        own = self.actor_slots(actor_id)
        while True:
            free = [s for s in own if int(self.state[s]) == FREE][:count]
            if len(free) == count:
                for s in free:
                    self.state[s] = WRITING
                return free
            if should_stop():
                return []
            if time.monotonic() > deadline:
                raise TimeoutError(f"actor {actor_id}: no free unroll slot in {timeout:.0f}s")
            # why: the learner frees slots at its own pace; polling at 1 ms costs nothing
            # next to an unroll and needs no cross-process condition variable.
            time.sleep(0.001)

    def commit(
        self,
        slots: list[int],
        actor_id: int,
        level_id: int,
        version: int,
    ) -> None:
        """Publish fully written slots to the learner."""
        for s in slots:
            self.actor_id[s] = actor_id
            self.level_id[s] = level_id
            self.policy_version[s] = version
            # why: state flips to READY only after every field is written; the pipe write
            # that follows (a system call: a memory barrier) is what the learner waits on.
            self.state[s] = READY
        if self._sender is None:
            raise RuntimeError("UnrollBuffers.commit: no pipe; call attach(open_channel(id))")
        if not self._sender.send(slots):
            # why: cannot happen in practice (an actor has at most slots_per_actor READY
            # slots in flight, a few bytes each), but a lost index must not lose the slot.
            raise RuntimeError(f"actor {actor_id}: could not hand slots {slots} to the learner")

    # ---- supervisor side --------------------------------------------------------------
    def release_actor(self, actor_id: int) -> int:
        """After actor `actor_id` died: free its half-written slots, close its pipe and queue
        its READY slots for the learner. Returns how many half-written slots were dropped."""
        dropped = 0
        with self._lock:
            reader = self._readers.pop(actor_id, None)
            if reader is not None:
                # why: indices still in the pipe are queued below from the slot states, so
                # the pipe's contents can go: each READY slot is queued exactly once.
                reader.close()
            for s in self.actor_slots(actor_id):
                state = int(self.state[s])
                if state == WRITING:
                    self.state[s] = FREE
                    dropped += 1
                elif state == READY and s not in self._pending:
                    self._pending.append(s)
        return dropped

    # ---- learner side -----------------------------------------------------------------
    def _receive(self, wait_s: float) -> None:
        """Move indices from the actors' pipes into `_pending`, waiting up to `wait_s`."""
        with self._lock:
            readers = list(self._readers.items())
        if not readers:
            time.sleep(min(wait_s, 0.01))
            return
        with contextlib.suppress(OSError, ValueError):  # a pipe closed meanwhile
            connection.wait([r for _, r in readers], timeout=wait_s)
        for actor_id, reader in readers:
            with self._lock:
                if self._readers.get(actor_id) is not reader:
                    continue  # replaced or closed by the supervisor meanwhile
                messages, closed = receive_all(reader)
                for slots in messages:
                    self._pending.extend(slots)
                if closed:
                    # why: the actor's process ended; its READY slots are queued by
                    # release_actor when the supervisor notices.
                    self._readers.pop(actor_id).close()

    def take(
        self, count: int, timeout: float, should_stop: Callable[[], bool] = lambda: False
    ) -> list[int]:
        """Wait for `count` READY slots (raises TimeoutError); [] once `should_stop()`."""
        deadline = time.monotonic() + timeout
        taken: list[int] = []
        while len(taken) < count:
            with self._lock:
                while self._pending and len(taken) < count:
                    s = self._pending.popleft()
                    if int(self.state[s]) == READY and s not in taken:
                        taken.append(s)
            if len(taken) == count:
                break
            remaining = deadline - time.monotonic()
            if should_stop() or remaining <= 0:
                # why: give back what we hold, in order, so nothing is lost on a retry.
                with self._lock:
                    self._pending.extendleft(reversed(taken))
                if should_stop():
                    return []
                raise TimeoutError(f"learner: no unroll from any actor in {timeout:.0f}s")
            self._receive(min(remaining, 0.5))
        return taken

    def gather(self, slots: list[int]) -> dict[str, torch.Tensor]:
        """Copy slots into a time-major batch `[T+1, B, ...]` (state fields `[B, H]`)."""
        index = torch.tensor(slots, dtype=torch.long)
        batch = {
            name: tensor.index_select(0 if is_state(name) else 1, index)
            for name, tensor in self.data.items()
        }
        batch["policy_version"] = self.policy_version.index_select(0, index)
        batch["level_id"] = self.level_id.index_select(0, index)
        batch["actor_id"] = self.actor_id.index_select(0, index)
        return batch

    def release(self, slots: list[int]) -> None:
        for s in slots:
            self.state[s] = FREE

    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Gathered batches (slots freed once copied) until `should_stop()`."""
        while True:
            slots = self.take(batch_size, timeout, should_stop)
            if not slots:
                return
            batch = self.gather(slots)
            self.release(slots)
            yield batch
