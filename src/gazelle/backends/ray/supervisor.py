"""The life of a fleet's Ray actors (IMPALA's actors, A3C's workers): start, tell *pending*
from *hung*, replace with a budget and backoff.

- Each Ray actor is asked for its `ready()` right after it is created. Until that answers,
  the actor is *starting*: Ray may not have placed it yet, or its constructor is running.
- One that has not started after `timeout_s` is *pending* when no node has its CPUs free
  (e.g. after a node left): it waits in Ray's queue and an `actor_pending` event says so
  once; `actor_placed` follows when Ray places it. One that has not started after
  `START_TIMEOUT_S` (at least `timeout_s`) with CPUs free did not start: it is replaced like
  a hung one. Start-up gets longer than a started actor's silence: a new Ray worker process
  imports torch and builds its envs (over a minute was seen on a busy 2-core machine).
- A replacement is budgeted per actor and time window with backoff
  (`gazelle.runtime.restarts`); while it backs off the actor has no handle.

The fleets keep what is theirs (calls in flight, events, batches) and ask this class about
actors. It runs on one thread (the fleet's pump or poll), so it takes no lock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from gazelle.runtime.restarts import RestartBudget

Event = dict[str, Any]

#: The longest start (placed, constructor run) of an actor while CPUs are free.
START_TIMEOUT_S = 300.0


class Supervisor:
    """The Ray actors `0 .. len(names) - 1` of one fleet.

    Args:
        make: `make(index, restarts) -> handle` creates actor `index`'s Ray actor (its
            `restarts` so far tell a replacement's seed apart); it must have `ready()`.
        names: each actor's name in messages ("actor 3", "worker 1").
        ids: each actor's id in events.
        cpus_each: CPUs each actor declares (to tell pending from not started).
        timeout_s: the longest silence of a started actor, and the longest start with room.
        budget: makes each actor's `RestartBudget`.
    """

    def __init__(
        self,
        make: Callable[[int, int], Any],
        names: list[str],
        ids: list[int],
        cpus_each: float,
        timeout_s: float,
        budget: Callable[[str], RestartBudget] = RestartBudget,
    ) -> None:
        import ray

        self._ray, self._make, self.names, self.ids = ray, make, names, ids
        self.cpus_each, self.timeout_s = cpus_each, timeout_s
        self.start_timeout_s = max(timeout_s, START_TIMEOUT_S)
        n = len(names)
        self.handles: list[Any] = [None] * n
        self.budgets = [budget(name) for name in names]
        self.restarts, self.hung = [0] * n, [0] * n
        self.starting: dict[Any, int] = {}  # `ready` call ref -> actor index
        self.spawned = [time.monotonic()] * n
        self.pending = [False] * n
        self.respawn_at: list[float | None] = [None] * n
        self._all_started = False

    def spawn(self, index: int) -> None:
        handle = self._make(index, self.restarts[index])
        self.handles[index], self.respawn_at[index] = handle, None
        self.pending[index] = False
        self.starting[handle.ready.remote()] = index
        self.spawned[index] = time.monotonic()

    def spawn_due(self) -> list[int]:
        """Start the replacements whose backoff is over; their indices."""
        now = time.monotonic()
        due = [i for i, when in enumerate(self.respawn_at) if when is not None and now >= when]
        for index in due:
            self.spawn(index)
        return due

    def is_starting(self, index: int) -> bool:
        return index in self.starting.values()

    def started(self, ref: Any) -> tuple[int, Event | None, BaseException | None]:
        """A `ready` call answered: `(index, actor_placed event or None, error or None)`."""
        index = self.starting.pop(ref)
        try:
            self._ray.get(ref)
        except self._ray.exceptions.RayError as error:
            return index, None, error
        event = None
        if self.pending[index]:
            waited = time.monotonic() - self.spawned[index]
            event = {"type": "actor_placed", "actor": self.ids[index], "waited_s": waited}
        self.pending[index] = False
        if not self._all_started and not self.starting and None not in self.handles:
            from gazelle.backends.ray.cluster import after_start

            # why: once, when every actor's process runs: a private instance's workers
            # listen too, and are checked as its other processes were at start-up.
            self._all_started = True
            after_start()
        return index, event, None

    def _room(self) -> bool:
        free = self._ray.available_resources().get("CPU", 0.0)
        return bool(free + 1e-9 >= self.cpus_each)

    def not_started(self) -> tuple[list[int], list[Event]]:
        """Actors still starting: `(indices to replace, events)`. After `timeout_s` one that
        cannot be placed is marked pending (one event); after `start_timeout_s` with room
        it is to be replaced."""
        now = time.monotonic()
        replace, events = [], []
        for index in set(self.starting.values()):
            waited = now - self.spawned[index]
            if waited <= self.timeout_s or self.pending[index]:
                continue
            room = self._room()
            if room and waited > self.start_timeout_s:
                self.hung[index] += 1
                replace.append(index)
                events.append({"type": "actor_hung", "actor": self.ids[index], "silent_s": waited})
            elif not room:
                self.pending[index] = True
                events.append({"type": "actor_pending", "actor": self.ids[index],
                               "cpus": self.cpus_each, "waited_s": waited})  # fmt: skip
        return replace, events

    def replace(self, index: int, reason: str, **fields: Any) -> Event:
        """Kill actor `index` and schedule its replacement after the backoff (raises
        `RunError` once its budget is spent); the `actor_restart` event."""
        for ref in [ref for ref, i in self.starting.items() if i == index]:
            del self.starting[ref]
        with contextlib.suppress(Exception):  # already gone with its node
            self._ray.kill(self.handles[index], no_restart=True)
        self.handles[index], self.pending[index] = None, False
        delay = self.budgets[index].record(reason)
        self.restarts[index] += 1
        self.respawn_at[index] = time.monotonic() + delay
        return {"type": "actor_restart", "actor": self.ids[index], "restarts": self.restarts[index],
                "reason": reason, "backoff_s": delay, **fields}  # fmt: skip

    def state(self, index: int) -> str:
        """What `describe()` says of actor `index`."""
        if self.handles[index] is None:
            return "backing off before its replacement"
        if self.pending[index]:
            return "pending (no node has its CPUs free)"
        return "starting" if self.is_starting(index) else "Ray actor"

    def close(self) -> None:
        """Kill every actor and drop every reference (before Ray shuts down)."""
        for handle in self.handles:
            if handle is not None:
                with contextlib.suppress(Exception):
                    self._ray.kill(handle, no_restart=True)
        self.starting.clear()
        self.handles = [None] * len(self.handles)
