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
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from gazelle import registrations
from gazelle.backends.ray.health import Heartbeat
from gazelle.backends.ray.hosts import ActorHost
from gazelle.backends.ray.params import RayParams
from gazelle.backends.ray.supervisor import Supervisor
from gazelle.backends.ray.unrolls import UnrollQueue
from gazelle.errors import RunError
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.restarts import RESTART_SEED_STRIDE, RestartBudget

#: Creations of one actor that fail in its constructor, in a row, before the run gives up.
#: Why: the same code and arguments fail the same way (an env or torso that the cluster's
#: workers cannot import or build); waiting out the restart budget's backoffs took minutes.
MAX_INIT_FAILURES = 3
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|NotFound|Exit|Interrupt)\w*: ")


def init_failure(error: BaseException) -> str | None:
    """The cause's line of a Ray error raised by an actor's constructor (`ModuleNotFoundError:
    No module named 'x'`), or None for any other error (a process or node lost, ...)."""
    if not getattr(error, "actor_init_failed", False):
        return None
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # why: the cause is the last "name: message" line of the traceback Ray wraps
    named = [line for line in lines if _RAISED.match(line)]
    return (named or lines or [type(error).__name__])[-1][:300]


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
        max_init_failures: an actor whose constructor fails this many times in a row stops
            the run (`MAX_INIT_FAILURES`); None: only its budget does.
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
        max_init_failures: int | None = MAX_INIT_FAILURES,
    ) -> None:
        from gazelle.backends.ray.cluster import require_ray

        ray = self._ray = require_ray()
        self.specs, self.params = list(specs), params
        self.calls_per_actor = slots_per_env
        self.actor_timeout_s = actor_timeout_s
        self.owns_ray, self.server = owns_ray, server
        self.max_init_failures = max_init_failures
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
        # what the pump thread and the learner's thread share (it holds their lock)
        self.unrolls = UnrollQueue(n, self._index_of)
        # the pump thread's own: unroll call ref -> actor index, last unroll back (or start)
        self._in_flight: dict[Any, int] = {}
        self._progress = [time.monotonic()] * n
        self._init_failures = [0] * n
        self._stop = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.get_s = 0.0

    @property
    def dropped_slots(self) -> int:
        """Env slots whose calls were lost with a replaced actor (the `Fleet` counter)."""
        return self.unrolls.dropped_slots

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

    def _replace(self, index: int, reason: str, **fields: Any) -> None:
        """Drop actor `index`'s calls; the supervisor kills it and schedules a new one."""
        lost = [ref for ref, i in self._in_flight.items() if i == index]
        for ref in lost:
            del self._in_flight[ref]
        slots = self.specs[index].envs_per_actor * len(lost)
        self.unrolls.drop(index, slots)
        self.unrolls.add_events(self.actors.replace(index, reason, dropped_slots=slots, **fields))

    # ---- the pump (its own thread) ----------------------------------------------------
    def _pump_guarded(self) -> None:
        try:
            self._pump()
        except BaseException as error:  # surfaced by check() on the loop's thread
            self.unrolls.fail(error)

    def _submit(self) -> None:
        for index, handle in enumerate(self.actors.handles):
            if handle is None:
                continue  # backing off before its replacement starts
            envs = self.specs[index].envs_per_actor
            while self.unrolls.has_room(index, envs, self.calls_per_actor):
                box, version = self.params.latest()
                ref = handle.unroll.remote(box, version)
                self.unrolls.hold(index, envs)
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
                    self.unrolls.add_events(placed)
                    if error is not None:
                        self._failed(index, error)
                    else:
                        self._init_failures[index] = 0
                        self._progress[index] = time.monotonic()
                else:
                    self._collect(ref)
            self._watch()

    def _failed_start(self, index: int, error: BaseException) -> None:
        """Count a constructor's failure; raise `RunError` at `MAX_INIT_FAILURES` in a row."""
        cause = init_failure(error)
        if cause is None or self.max_init_failures is None:
            return
        self._init_failures[index] += 1
        if self._init_failures[index] >= self.max_init_failures:
            raise RunError(
                f"actor {self.specs[index].actor_id} could not be created "
                f"{self._init_failures[index]} times in a row on the Ray workers: {cause}"
            )

    def _failed(self, index: int, error: BaseException) -> None:
        """Any Ray error on one actor's call is that actor's fault: replace it."""
        # why: a constructor's failure shows on the ready call or on the first unroll call
        self._failed_start(index, error)
        if isinstance(error, self._ray.exceptions.RayTaskError):
            self.unrolls.add_events({"type": "actor_crash", "actor": self.specs[index].actor_id,
                              "message": str(error)[-2000:]})  # fmt: skip
            self._replace(index, "unroll raised")
        else:
            # RayActorError (process died, node left), ObjectLostError, OwnerDiedError ...
            first = (str(error).strip().splitlines() or [""])[0]
            self._replace(index, type(error).__name__, message=first[:300])
            self._restart_hang_clocks()

    def _restart_hang_clocks(self) -> None:
        """Every busy actor's hang clock starts again now.

        why: a process or node lost makes the cluster stall object transfers for seconds
        (measured: a node removed under a 3-node test cluster held the survivors' unrolls
        back past a 4 s --actor-timeout-s, and a survivor was killed as hung). The stall is
        the cluster's, not the survivors'; each gets a whole timeout from the loss. Bounded:
        losses are budgeted (`RestartBudget`), so a hung actor is still found."""
        now = time.monotonic()
        for index in set(self._in_flight.values()):
            self._progress[index] = now

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        index = self._in_flight.pop(ref, None)
        if index is None:
            return
        t0 = time.perf_counter()
        try:
            result = ray.get(ref)  # ready: ray.wait (fetch_local) found it here
        except ray.exceptions.RayError as error:
            self._in_flight[ref] = index  # dropped with the others by _replace
            self._failed(index, error)
            return
        self.get_s += time.perf_counter() - t0
        self._progress[index] = time.monotonic()
        self._init_failures[index] = 0
        self.unrolls.put(result, self.specs[index].envs_per_actor)

    def _watch(self) -> None:
        """Replace actors that did not start with room to, and started ones gone silent."""
        replace, events = self.actors.not_started()
        self.unrolls.add_events(*events)
        for index in replace:
            self._replace(index, "did not start")
        now = time.monotonic()
        busy = {i for i in self._in_flight.values() if not self.actors.is_starting(i)}
        for index in busy:
            silent = now - self._progress[index]
            if silent > self.actor_timeout_s:
                self.hung[index] += 1
                self.unrolls.add_events({"type": "actor_hung", "actor": self.specs[index].actor_id,
                                  "silent_s": silent})  # fmt: skip
                self._replace(index, "hung")

    # ---- BatchSource --------------------------------------------------------------------
    def batches(
        self, batch_size: int, timeout: float, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Time-major batches `[T+1, B, ...]` of finished unrolls until `should_stop()`."""
        return self.unrolls.batches(batch_size, timeout, should_stop)

    def _index_of(self, result: dict[str, Any]) -> int:
        actor_id = result["meta"]["actor_id"]
        return next(i for i, s in enumerate(self.specs) if s.actor_id == actor_id)

    # ---- Fleet ----------------------------------------------------------------------------
    def poll(self) -> list[dict[str, Any]]:
        self.check()
        return self.unrolls.take_events()

    def check(self) -> None:
        """Raise if the pump thread failed (e.g. an actor's restart budget is spent) or,
        with central inference, the server failed or went silent (never blocks)."""
        error = self.unrolls.error
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
        unrolls_in = self.unrolls.unrolls_in
        per_unroll = self.get_s / unrolls_in if unrolls_in else 0.0
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
        self._in_flight.clear()  # after the pump thread's join above
        self.unrolls.clear()
        if self._server_watch is not None:
            self._server_watch.forget()
        self.server = None
        self.params.forget()
        if self.owns_ray:
            from gazelle.backends.ray.cluster import disconnect

            disconnect()
