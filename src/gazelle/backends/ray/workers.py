"""Workers on Ray (A3C's, the seed's distributed mode): a parameter-server Ray actor holds
the parameter store the algorithm hands the backend (its global weights and optimiser
state), and each worker is a Ray actor running the work the algorithm hands the backend, as
a local worker process does (`work(spec, context, server, settings)`: A3C's `run_worker`):
it pulls the weights, computes its gradient and pushes it; the server applies pushes one at
a time. This module knows no algorithm (`gazelle.backends.WorkerRequest`).

The driver only watches, as on one machine: `RayWorkerFleet.poll` drains each worker's
events, and replaces a worker whose process died, whose loop raised or that went silent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

from gazelle import registrations
from gazelle.backends import WorkerRequest, Workers
from gazelle.backends.ray.health import Heartbeat
from gazelle.backends.ray.param_server import ParameterServerHost, RayParameterServer, first_line
from gazelle.backends.ray.supervisor import Supervisor
from gazelle.registrations import Registrations
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.interfaces import Work
from gazelle.runtime.restarts import RESTART_SEED_STRIDE

#: Seconds between two drains of a worker's events.
DRAIN_S = 0.25


class WorkerHost:
    """One A3C worker in a Ray actor: `run()` is the work it was handed (on one of the
    actor's two threads), with this host as its `WorkerContext`; `drain()` hands the driver
    its events and seconds since its last sign of life; `stop()` ends the loop."""

    def __init__(
        self,
        registrations: Registrations,
        work: Work,
        spec: ActorSpec,
        server: RayParameterServer,
        settings: Any,
    ) -> None:
        registrations.restore()
        self.work, self.spec, self.server, self.settings = work, spec, server, settings
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._beat = time.monotonic()

    # the WorkerContext (gazelle.runtime.interfaces) that the work talks to
    def report(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)

    def beat(self) -> None:
        self._beat = time.monotonic()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def waiting(self) -> bool:
        self.beat()
        return self.should_stop()

    def run(self) -> None:
        self.work(self.spec, self, self.server, self.settings)

    def drain(self) -> tuple[list[dict[str, Any]], float]:
        with self._lock:
            events, self._events = self._events, []
        return events, time.monotonic() - self._beat

    def stop(self) -> None:
        self._stop.set()

    def ready(self) -> int:
        """Answers once the worker is placed and built (the fleet's start-up check)."""
        return self.spec.actor_id


def build_workers(request: WorkerRequest) -> Workers:
    """Connect to (or start) Ray; the parameter server (started, holding
    `request.make_server(request.agent)`) and the workers' fleet (not yet started), each
    worker to run `request.work(spec, context, server, request.settings)`."""
    from gazelle.backends.ray.cluster import check_room, connect, require_ray

    ray = require_ray()
    specs = request.specs
    owns = connect(request.cluster_address, request.dashboard, request.allow_tokenless)
    check_room(len(specs), request.cpus_per_actor, "workers")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # why: on the driver's node, as the central inference server: it holds the run's
    # weights and Adam's moments, so it must not go with another node (it goes with the
    # driver's, when the run is over anyway)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    host = (
        ray.remote(num_cpus=0)(ParameterServerHost)
        .options(scheduling_strategy=here)
        .remote(request.agent, request.make_server)
    )
    server = RayParameterServer(host, timeout_s=request.actor_timeout_s)
    fleet = RayWorkerFleet(
        request.work, specs, server, request.settings, request.cpus_per_actor,
        request.actor_timeout_s, owns,
    )  # fmt: skip
    return Workers(server, fleet)


class RayWorkerFleet:
    """A3C's workers as Ray actors; implements `gazelle.runtime.interfaces.Fleet`.

    Never blocks the loop: each worker has at most one `drain` call outstanding, looked at
    with `ray.wait(timeout=0)`; a worker whose drain stays unanswered for `actor_timeout_s`
    (a stopped process) or that reports no sign of life for as long is hung and replaced.
    Start-up, pending placement and replacement budgets are the `Supervisor`'s, as for
    IMPALA's actors; the parameter server is watched by a `Heartbeat`."""

    def __init__(
        self,
        work: Work,
        specs: list[ActorSpec],
        server: RayParameterServer,
        settings: Any,
        cpus_per_worker: float,
        actor_timeout_s: float,
        owns_ray: bool,
    ) -> None:
        from gazelle.backends.ray.cluster import require_ray

        ray = self._ray = require_ray()
        self.work, self.specs, self.server, self.settings = work, list(specs), server, settings
        # why: two threads: `run` holds one for the whole run, `drain`/`stop` use the other.
        self._remote = ray.remote(num_cpus=cpus_per_worker, max_concurrency=2)(WorkerHost)
        self.actor_timeout_s, self.owns_ray = actor_timeout_s, owns_ray
        self.workers = Supervisor(
            self._make,
            [f"worker {spec.actor_id}" for spec in self.specs],
            [spec.actor_id for spec in self.specs],
            cpus_per_worker,
            actor_timeout_s,
        )
        self.restarts, self.hung = self.workers.restarts, self.workers.hung
        n = len(self.specs)
        self.runs: list[Any] = [None] * n
        self._drains: list[tuple[Any, float] | None] = [None] * n  # (ref, sent at)
        self.silent = [0.0] * n
        self.dropped_slots = 0
        self._registrations = registrations.capture()
        self._server_watch = Heartbeat(
            server.handle, "counts", "A3C parameter server", actor_timeout_s
        )
        self._leftover: list[dict[str, Any]] = []
        self._last_drain = 0.0
        self._closed = False

    def _make(self, index: int, restarts: int) -> Any:
        spec = self.specs[index]
        if restarts:
            seed = spec.seed + RESTART_SEED_STRIDE * restarts
            spec = dataclasses.replace(spec, seed=seed)
        handle = self._remote.remote(
            self._registrations, self.work, spec, self.server, self.settings
        )
        self.runs[index], self._drains[index] = handle.run.remote(), None
        self.silent[index] = 0.0
        return handle

    def start(self) -> None:
        for index in range(len(self.specs)):
            self.workers.spawn(index)

    def _replace(self, index: int, reason: str) -> dict[str, Any]:
        self.runs[index], self._drains[index] = None, None
        return self.workers.replace(index, reason[:300])

    def poll(self) -> list[dict[str, Any]]:
        """Drain the workers' events (every `DRAIN_S`); replace dead, failed, hung ones."""
        events, self._leftover = self._leftover, []
        now = time.monotonic()
        if self._closed or now - self._last_drain < DRAIN_S:
            return events
        self._last_drain = now
        self.workers.spawn_due()
        ray = self._ray
        for ref in list(self.workers.starting):
            done, _ = ray.wait([ref], timeout=0)
            if done:
                index, placed, error = self.workers.started(ref)
                events += [placed] if placed else []
                if error is not None:
                    events.append(self._replace(index, first_line(error)))
        replace, found = self.workers.not_started()
        events += found
        for index in replace:
            events.append(self._replace(index, "did not start"))
        for index, handle in enumerate(self.workers.handles):
            if handle is None or self.workers.is_starting(index):
                continue
            events += self._poll_worker(index, handle, now)
        return events

    def _poll_worker(self, index: int, handle: Any, now: float) -> list[dict[str, Any]]:
        ray, actor_id = self._ray, self.specs[index].actor_id
        events: list[dict[str, Any]] = []
        done, _ = ray.wait([self.runs[index]], timeout=0)
        if done:
            try:
                ray.get(done[0])  # ready: ray.wait found it done
                message = "the worker loop returned"
            except ray.exceptions.RayTaskError as error:
                message = str(error)[-2000:]
                events.append({"type": "actor_crash", "actor": actor_id, "message": message})
            except ray.exceptions.RayError as error:  # process died, node left ...
                message = f"the worker's process died: {first_line(error)}"
                self._restart_hang_clocks(now)
            return [*events, self._replace(index, message)]
        pending = self._drains[index]
        if pending is None:
            self._drains[index] = (handle.drain.remote(), now)
            return events
        ref, sent = pending
        answered, _ = ray.wait([ref], timeout=0)
        if answered:
            self._drains[index] = None
            try:
                new, silent = ray.get(ref)  # ready: ray.wait found it answered
            except ray.exceptions.RayError:
                return events  # its run() reports the death on the next poll
            events += new
            self.silent[index] = silent
        else:
            self.silent[index] = now - sent
        if self.silent[index] > self.actor_timeout_s:
            self.hung[index] += 1
            events.append({"type": "actor_hung", "actor": actor_id, "silent_s": self.silent[index]})
            events.append(self._replace(index, "hung"))
        return events

    def _restart_hang_clocks(self, now: float) -> None:
        """Every outstanding drain counts from `now` (see `RayFleet._restart_hang_clocks`:
        a lost process or node stalls the cluster's calls for seconds; not the survivors'
        silence)."""
        for index, pending in enumerate(self._drains):
            if pending is not None:
                self._drains[index] = (pending[0], now)

    def check(self) -> None:
        """Raise `RunError` if the parameter server failed or went silent (never blocks)."""
        if not self._closed:
            self._server_watch.check()

    def supervise(self) -> None:
        self._leftover = self.poll()

    def stats(self) -> dict[str, float]:
        return {}

    def describe(self) -> str:
        return "\n".join(
            f"worker {spec.actor_id}: {self.workers.state(i)}, last sign of life "
            f"{self.silent[i]:.0f} s ago, {self.restarts[i]} restart(s), {self.hung[i]} "
            "killed as hung"
            for i, spec in enumerate(self.specs)
        )

    def close(self, timeout: float = 10.0) -> None:
        ray = self._ray
        for handle in self.workers.handles:
            if handle is not None:
                handle.stop.remote()
        runs = [r for r in self.runs if r is not None]
        if runs:
            ray.wait(runs, num_returns=len(runs), timeout=timeout)
        for handle in self.workers.handles:
            if handle is not None:
                with contextlib.suppress(Exception):
                    self._leftover += ray.get(handle.drain.remote(), timeout=5.0)[0]
        self.workers.close()
        self._drains = [None] * len(self._drains)
        self._server_watch.forget()
        self._closed = True

    def shutdown(self) -> None:
        """After the last checkpoint (which reads the server): stop Ray if this run
        started it."""
        try:
            self.server._counts()  # why: the last counts, kept for the reads after the kill
        finally:
            # why: a silent server raises above (the run's one-line error); it is killed,
            # and a private Ray stopped, all the same.
            self.server.closed = True
            with contextlib.suppress(Exception):
                self._ray.kill(self.server.handle, no_restart=True)
            # why: no Ray object may outlive `ray.shutdown()` (see RayFleet.close).
            self.server.handle = None
            self.runs = [None] * len(self.runs)
            if self.owns_ray:
                from gazelle.backends.ray.cluster import disconnect

                disconnect()
