"""IMPALA's actors on a Ray cluster: one Ray actor per gazelle actor, unrolls through the
object store, weights put once per new version and fetched by reference.

A pump thread on the driver keeps every actor busy: each actor has at most `slots_per_env`
unroll calls outstanding or unconsumed (the local backend's slots, here as a count), and
finished unrolls wait, one per env, for the learner's `batches`.

Faults (docs/reliability.md): any Ray error on one actor's calls (its process died, its
node left, an object of its was lost, its unroll raised) is that actor's fault: it is
killed, its calls dropped (an unroll only leaves an actor whole, so nothing half-written
reaches the learner) and a new Ray actor with a fresh seed and LSTM state replaces it. An
actor is *hung* when it is placed and started but returns no unroll for `actor_timeout_s`;
it is replaced the same way. An actor that Ray cannot place (no node has its CPUs free,
e.g. after a node left) is *pending*, not hung: it waits in Ray's queue, the run goes on
with the others, and an event says so. Replacements are budgeted per actor and time window,
with backoff (`gazelle.runtime.restarts`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from gazelle import registrations
from gazelle.backends.local.layout import is_state
from gazelle.backends.local.process import RESTART_SEED_STRIDE
from gazelle.backends.ray.health import Heartbeat
from gazelle.backends.ray.hosts import ActorHost
from gazelle.backends.ray.params import RayParams
from gazelle.backends.ray.supervisor import Supervisor
from gazelle.errors import RunError
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.restarts import RestartBudget


class RayFleet:
    """Implements `Fleet` and `BatchSource` (see module docstring).

    Args:
        specs: one per actor.
        params: the weights the actors act with.
        slots_per_env: unrolls per env an actor may have outstanding or unconsumed.
        cpus_per_actor: CPUs each Ray actor declares.
        actor_timeout_s: a started actor with a call outstanding and no unroll back for this
            long is killed and replaced; also the longest silence of the inference server.
        owns_ray: shut Ray down on `close` (this run started it).
        server: the central inference server's Ray actor (None: actors act on their own
            copies).
        budget: makes each actor's `RestartBudget` (default: the module's defaults).
    """

    def __init__(
        self,
        specs: list[ActorSpec],
        params: RayParams,
        slots_per_env: int,
        cpus_per_actor: float = 1.0,
        actor_timeout_s: float = 120.0,
        owns_ray: bool = False,
        server: Any = None,
        budget: Callable[[str], RestartBudget] = RestartBudget,
    ) -> None:
        from gazelle.backends.ray.cluster import require_ray

        ray = self._ray = require_ray()
        self.specs, self.params = list(specs), params
        self.calls_per_actor = slots_per_env
        self.actor_timeout_s = actor_timeout_s
        self.owns_ray, self.server = owns_ray, server
        self._server_version = -1
        self._server_watch = (
            Heartbeat(server, "stats", "central inference server", actor_timeout_s)
            if server is not None
            else None
        )
        self._remote = ray.remote(num_cpus=cpus_per_actor, max_restarts=0)(ActorHost)
        self._registrations = registrations.capture()
        self.actors = Supervisor(
            self._make,
            [f"actor {spec.actor_id}" for spec in self.specs],
            [spec.actor_id for spec in self.specs],
            cpus_per_actor,
            actor_timeout_s,
            budget,
        )
        # the supervisor's own lists, updated in place (the `Fleet` protocol's counters)
        self.restarts, self.hung = self.actors.restarts, self.actors.hung
        n = len(self.specs)
        self.dropped_slots = 0
        # why: one condition guards what the pump thread and the learner's thread share:
        # the finished unrolls, each actor's outstanding count, the events, the error.
        self._cond = threading.Condition()
        self._ready: collections.deque[tuple[dict[str, Any], int]] = collections.deque()
        self._held = [0] * n  # unrolls per actor outstanding or waiting for the learner
        self._in_flight: dict[Any, int] = {}  # unroll call ref -> actor index
        self._progress = [time.monotonic()] * n  # last unroll back (or start)
        self._events: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.get_s, self.unrolls_in = 0.0, 0

    # ---- life cycle -------------------------------------------------------------------
    def _make(self, index: int, restarts: int) -> Any:
        spec = self.specs[index]
        if restarts:
            # why: a replacement must not replay its predecessor's episodes.
            spec = dataclasses.replace(spec, seed=spec.seed + RESTART_SEED_STRIDE * restarts)
        self._progress[index] = time.monotonic()
        return self._remote.remote(self._registrations, spec, self.server)

    def start(self) -> None:
        for index in range(len(self.specs)):
            self.actors.spawn(index)
        self._pump_thread = threading.Thread(target=self._pump_guarded, name="ray-pump")
        self._pump_thread.daemon = True
        self._pump_thread.start()

    def _add_events(self, *events: dict[str, Any] | None) -> None:
        with self._cond:
            self._events += [event for event in events if event is not None]

    def _replace(self, index: int, reason: str, **fields: Any) -> None:
        """Drop actor `index`'s calls; the supervisor kills it and schedules a new one."""
        lost = [ref for ref, i in self._in_flight.items() if i == index]
        for ref in lost:
            del self._in_flight[ref]
        envs = self.specs[index].envs_per_actor
        with self._cond:
            self._held[index] -= envs * len(lost)
            self.dropped_slots += envs * len(lost)
        event = self.actors.replace(index, reason, dropped_slots=envs * len(lost), **fields)
        self._add_events(event)

    # ---- the pump (its own thread) ----------------------------------------------------
    def _pump_guarded(self) -> None:
        try:
            self._pump()
        except BaseException as error:  # surfaced by check() on the loop's thread
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def _submit(self) -> None:
        for index, handle in enumerate(self.actors.handles):
            if handle is None:
                continue  # backing off before its replacement starts
            envs = self.specs[index].envs_per_actor
            while self._held[index] + envs <= envs * self.calls_per_actor:
                box, version = self.params.latest()
                ref = handle.unroll.remote(box, version)
                with self._cond:
                    self._held[index] += envs
                if not any(i == index for i in self._in_flight.values()):
                    # why: the hang clock of an idle actor starts with its first call.
                    self._progress[index] = time.monotonic()
                self._in_flight[ref] = index

    def _pump(self) -> None:
        ray = self._ray
        while not self._stop.is_set():
            if self.server is not None:
                box, version = self.params.latest()
                if version > self._server_version:
                    # why: fire and forget; the server loads it between two batches.
                    self.server.set_weights.remote(box, version)
                    self._server_version = version
            self.actors.spawn_due()
            self._submit()
            refs = [*self._in_flight, *self.actors.starting]
            if not refs:
                time.sleep(0.01)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.1)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in self.actors.starting:
                    index, placed, error = self.actors.started(ref)
                    self._add_events(placed)
                    if error is not None:
                        self._failed(index, error)
                    else:
                        self._progress[index] = time.monotonic()
                else:
                    self._collect(ref)
            self._watch()

    def _failed(self, index: int, error: BaseException) -> None:
        """Any Ray error on one actor's call is that actor's fault: replace it."""
        if isinstance(error, self._ray.exceptions.RayTaskError):
            self._add_events({"type": "actor_crash", "actor": self.specs[index].actor_id,
                              "message": str(error)[-2000:]})  # fmt: skip
            self._replace(index, "unroll raised")
        else:
            # RayActorError (process died, node left), ObjectLostError, OwnerDiedError ...
            first = (str(error).strip().splitlines() or [""])[0]
            self._replace(index, type(error).__name__, message=first[:300])

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        index = self._in_flight.pop(ref, None)
        if index is None:
            return
        t0 = time.perf_counter()
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as error:
            self._in_flight[ref] = index  # dropped with the others by _replace
            self._failed(index, error)
            return
        self.get_s += time.perf_counter() - t0
        self._progress[index] = time.monotonic()
        envs = self.specs[index].envs_per_actor
        with self._cond:
            self.unrolls_in += envs
            self._events += result["events"]
            for j in range(envs):
                self._ready.append((result, j))
            self._cond.notify_all()

    def _watch(self) -> None:
        """Replace actors that did not start with room to, and started ones gone silent."""
        replace, events = self.actors.not_started()
        self._add_events(*events)
        for index in replace:
            self._replace(index, "did not start")
        now = time.monotonic()
        busy = {i for i in self._in_flight.values() if not self.actors.is_starting(i)}
        for index in busy:
            silent = now - self._progress[index]
            if silent > self.actor_timeout_s:
                self.hung[index] += 1
                self._add_events({"type": "actor_hung", "actor": self.specs[index].actor_id,
                                  "silent_s": silent})  # fmt: skip
                self._replace(index, "hung")

    # ---- BatchSource --------------------------------------------------------------------
    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Time-major batches `[T+1, B, ...]` of finished unrolls until `should_stop()`."""
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
            yield _assemble(taken)

    def _index_of(self, result: dict[str, Any]) -> int:
        actor_id = result["meta"]["actor_id"]
        return next(i for i, s in enumerate(self.specs) if s.actor_id == actor_id)

    # ---- Fleet ----------------------------------------------------------------------------
    def poll(self) -> list[dict[str, Any]]:
        self.check()
        with self._cond:
            events, self._events = self._events, []
        return events

    def check(self) -> None:
        """Raise if the pump thread failed (e.g. an actor's restart budget is spent) or,
        with central inference, the server failed or went silent (never blocks)."""
        with self._cond:
            error = self._error
        if self._stop.is_set():
            return
        if error is not None:
            if isinstance(error, RunError):
                raise error
            raise RuntimeError(f"the Ray backend's pump failed: {error!r}") from error
        if self._server_watch is not None:
            self._server_watch.check()

    def supervise(self) -> None:
        """The pump thread replaces dead and hung actors as it goes; this only re-raises
        its failure."""
        self.check()

    def stats(self) -> dict[str, float]:
        """Transport costs (ms of `ray.get` per env's unroll on the driver, weight puts)
        and, with central inference, the server's batches (its last heartbeat's answer)."""
        per_unroll = self.get_s / self.unrolls_in if self.unrolls_in else 0.0
        out = {"ray/get_ms_per_unroll": 1000.0 * per_unroll, "ray/weight_puts": self.params.puts}
        if self._server_watch is not None and self._server_watch.last:
            out.update(self._server_watch.last)
        return out

    def describe(self) -> str:
        now = time.monotonic()
        busy = collections.Counter(self._in_flight.values())
        return "\n".join(
            f"actor {spec.actor_id}: {self.actors.state(i)}, {busy.get(i, 0)} call(s) "
            f"outstanding, last "
            f"unroll {now - self._progress[i]:.0f} s ago, {self.restarts[i]} restart(s), "
            f"{self.hung[i]} killed as hung"
            for i, spec in enumerate(self.specs)
        )

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._pump_thread is not None:
            # why: one pump iteration is bounded (a 0.1 s wait, then ready results), so it
            # ends soon; it must end before Ray may be shut down under it.
            self._pump_thread.join(timeout=max(timeout, 60.0))
        self.actors.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(self.server, no_restart=True)
        # why: drop every Ray object this fleet holds (call refs, results backed by the
        # object store, actor handles, the weights' ref) while Ray is up: freeing one after
        # `ray.shutdown()` makes Ray's core worker exit the whole process (seen in
        # benchmarks/ray_scaling.py, which shuts its cluster down after each run).
        with self._cond:
            self._in_flight.clear()
            self._ready.clear()
        if self._server_watch is not None:
            self._server_watch.forget()
        self.server = None
        self.params.forget()
        if self.owns_ray:
            self._ray.shutdown()


def _assemble(taken: list[tuple[dict[str, Any], int]]) -> dict[str, torch.Tensor]:
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
