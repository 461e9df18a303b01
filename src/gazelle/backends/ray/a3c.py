"""A3C on Ray: a parameter-server Ray actor holds the global weights and Adam's state (the
A3C seed's distributed mode), and each worker is a Ray actor running the same worker loop
as a local process (`gazelle.algorithms.a3c.worker.run_worker`): it pulls the weights,
computes its gradient and pushes it; the server applies pushes one at a time.

The driver only watches, as on one machine: `RayWorkerFleet.poll` drains each worker's
events, and replaces a worker whose process died, whose loop raised or that went silent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from gazelle import plugins
from gazelle.backends.local.hogwild import SharedAdamServer
from gazelle.backends.local.params import flatten, load_flat
from gazelle.backends.local.process import RESTART_SEED_STRIDE
from gazelle.runtime.actor import ActorSpec

#: Seconds between two drains of a worker's events.
DRAIN_S = 0.25


class ParameterServerHost:
    """The global network and Adam (torch's formula, as the local `SharedAdamServer`, whose
    arithmetic it reuses); calls run one at a time, so pushes never interleave."""

    def __init__(
        self, agent: nn.Module, num_workers: int, lr: float, eps: float, decay_frames: int | None
    ) -> None:
        torch.set_num_threads(1)
        self.agent = agent
        self.adam = SharedAdamServer(agent, num_workers, lr, eps=eps, decay_frames=decay_frames)

    def pull(self) -> tuple[np.ndarray, int]:
        return flatten(self.agent).numpy(), self.adam.step_count

    def push(self, grads: list[np.ndarray | None], worker: int) -> int:
        return self.adam.push([None if g is None else torch.from_numpy(g) for g in grads], worker)

    def push_measured(
        self, grads: list[np.ndarray | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        tensors = [None if g is None else torch.from_numpy(g) for g in grads]
        return self.adam.push_measured(tensors, worker)

    def add_frames(self, worker: int, frames: int) -> None:
        self.adam.add_frames(worker, frames)

    def counts(self) -> tuple[int, int]:
        return self.adam.step_count, self.adam.frame_count

    def set_weights(self, flat: np.ndarray) -> None:
        load_flat(self.agent, torch.from_numpy(np.array(flat)))

    def state_dict(self) -> dict[str, object]:
        return self.adam.state_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.adam.load_state_dict(state)


class RayParameterServer:
    """A `ParameterServer` that forwards to the server actor (picklable: workers get it)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        #: The last counts seen; what `step_count` and `frame_count` say once the server
        #: is shut down (`closed`) at the end of a run.
        self.last_counts = (0, 0)
        self.closed = False

    def _get(self, ref: Any) -> Any:
        import ray

        return ray.get(ref)

    def _counts(self) -> tuple[int, int]:
        if not self.closed:
            steps, frames = self._get(self.handle.counts.remote())
            self.last_counts = (int(steps), int(frames))
        return self.last_counts

    @property
    def step_count(self) -> int:
        return self._counts()[0]

    @property
    def frame_count(self) -> int:
        return self._counts()[1]

    def pull(self, module: nn.Module) -> int:
        flat, step = self._get(self.handle.pull.remote())
        load_flat(module, torch.from_numpy(np.array(flat)))
        return int(step)

    def push(self, grads: Sequence[torch.Tensor | None], worker: int) -> int:
        arrays = [None if g is None else g.detach().cpu().numpy() for g in grads]
        return int(self._get(self.handle.push.remote(arrays, worker)))

    def push_measured(
        self, grads: Sequence[torch.Tensor | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        arrays = [None if g is None else g.detach().cpu().numpy() for g in grads]
        step, stats = self._get(self.handle.push_measured.remote(arrays, worker))
        return int(step), dict(stats)

    def add_frames(self, worker: int, frames: int) -> None:
        self._get(self.handle.add_frames.remote(worker, frames))

    def load_weights(self, module: nn.Module) -> None:
        self._get(self.handle.set_weights.remote(flatten(module).numpy()))

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = self._get(self.handle.state_dict.remote())
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        self._get(self.handle.load_state_dict.remote(state))


class WorkerHost:
    """One A3C worker in a Ray actor: `run()` is the worker loop (on one of the actor's two
    threads); `drain()` hands the driver its events and seconds since its last sign of
    life; `stop()` ends the loop."""

    def __init__(
        self,
        registrations: plugins.Registrations,
        spec: ActorSpec,
        server: RayParameterServer,
        settings: Any,
    ) -> None:
        registrations.restore()
        self.spec, self.server, self.settings = spec, server, settings
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._beat = time.monotonic()

    # the WorkerContext that run_worker talks to
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
        from gazelle.algorithms.a3c.worker import run_worker

        run_worker(self.spec, self, self.server, self.settings)

    def drain(self) -> tuple[list[dict[str, Any]], float]:
        with self._lock:
            events, self._events = self._events, []
        return events, time.monotonic() - self._beat

    def stop(self) -> None:
        self._stop.set()


def build_workers(
    agent: nn.Module,
    specs: list[ActorSpec],
    settings: Any,
    lr: float,
    eps: float,
    decay_frames: int | None,
    address: str | None,
    cpus_per_worker: float,
    actor_timeout_s: float,
    dashboard: bool = False,
) -> tuple[RayParameterServer, RayWorkerFleet]:
    """Connect to (or start) Ray; the parameter server (started) and the workers' fleet
    (not yet started)."""
    from gazelle.backends.ray.cluster import check_room, connect, require_ray

    ray = require_ray()
    owns = connect(address, dashboard)
    check_room(len(specs), cpus_per_worker, "workers")
    host = ray.remote(num_cpus=0)(ParameterServerHost).remote(
        agent, len(specs), lr, eps, decay_frames
    )
    server = RayParameterServer(host)
    fleet = RayWorkerFleet(specs, server, settings, cpus_per_worker, actor_timeout_s, owns)
    return server, fleet


class RayWorkerFleet:
    """A3C's workers as Ray actors; implements `gazelle.runtime.interfaces.Fleet`."""

    def __init__(
        self,
        specs: list[ActorSpec],
        server: RayParameterServer,
        settings: Any,
        cpus_per_worker: float,
        actor_timeout_s: float,
        owns_ray: bool,
        max_restarts: int = 100,
    ) -> None:
        from gazelle.backends.ray.cluster import require_ray

        ray = self._ray = require_ray()
        self.specs, self.server, self.settings = list(specs), server, settings
        # why: two threads: `run` holds one for the whole run, `drain`/`stop` use the other.
        self._remote = ray.remote(num_cpus=cpus_per_worker, max_concurrency=2)(WorkerHost)
        self.actor_timeout_s, self.owns_ray = actor_timeout_s, owns_ray
        self.max_restarts = max_restarts
        n = len(self.specs)
        self.handles: list[Any] = [None] * n
        self.runs: list[Any] = [None] * n
        self.restarts, self.hung = [0] * n, [0] * n
        self.silent = [0.0] * n
        self.dropped_slots = 0
        self._registrations = plugins.capture()
        self._leftover: list[dict[str, Any]] = []
        self._last_drain = 0.0
        self._closed = False

    def _spawn(self, index: int) -> None:
        spec = self.specs[index]
        if self.restarts[index]:
            seed = spec.seed + RESTART_SEED_STRIDE * self.restarts[index]
            spec = dataclasses.replace(spec, seed=seed)
        handle = self._remote.remote(self._registrations, spec, self.server, self.settings)
        self.handles[index], self.runs[index] = handle, handle.run.remote()
        self.silent[index] = 0.0

    def start(self) -> None:
        for index in range(len(self.specs)):
            self._spawn(index)

    def _replace(self, index: int, event: dict[str, Any]) -> dict[str, Any]:
        with contextlib.suppress(Exception):
            self._ray.kill(self.handles[index], no_restart=True)
        self.restarts[index] += 1
        actor_id = self.specs[index].actor_id
        if self.restarts[index] > self.max_restarts:
            raise RuntimeError(f"worker {actor_id} died {self.restarts[index]} times; giving up")
        self._spawn(index)
        return {"type": "actor_restart", "actor": actor_id, "restarts": self.restarts[index],
                **event}  # fmt: skip

    def poll(self) -> list[dict[str, Any]]:
        """Drain the workers' events (every `DRAIN_S`); replace dead, failed, hung ones."""
        events, self._leftover = self._leftover, []
        now = time.monotonic()
        if self._closed or now - self._last_drain < DRAIN_S:
            return events
        self._last_drain = now
        ray = self._ray
        for index, handle in enumerate(self.handles):
            actor_id = self.specs[index].actor_id
            done, _ = ray.wait([self.runs[index]], timeout=0)
            if done:
                try:
                    ray.get(done[0])
                    message = "the worker loop returned"
                except ray.exceptions.RayActorError as error:
                    message = f"the worker's process died: {str(error)[:300]}"
                except ray.exceptions.RayTaskError as error:
                    message = str(error)[-2000:]
                    events.append({"type": "actor_crash", "actor": actor_id, "message": message})
                events.append(self._replace(index, {"reason": message[:300]}))
                continue
            try:
                new, silent = ray.get(handle.drain.remote(), timeout=30.0)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                continue  # its run() reports the death on the next poll
            events += new
            self.silent[index] = silent
            if silent > self.actor_timeout_s:
                self.hung[index] += 1
                events.append({"type": "actor_hung", "actor": actor_id, "silent_s": silent})
                events.append(self._replace(index, {"reason": "hung"}))
        return events

    def check(self) -> None:
        ready, _ = self._ray.wait([self.server.handle.counts.remote()], timeout=60.0)
        if not ready:
            raise RuntimeError("the A3C parameter server did not answer in 60 s")
        try:
            self._ray.get(ready[0])
        except self._ray.exceptions.RayActorError as error:
            raise RuntimeError(
                "the A3C parameter server died; the run cannot go on:\n"
                + "".join(traceback.format_exception_only(error))
            ) from error

    def supervise(self) -> None:
        self._leftover = self.poll()

    def stats(self) -> dict[str, float]:
        return {}

    def describe(self) -> str:
        return "\n".join(
            f"worker {spec.actor_id}: Ray actor, last sign of life {self.silent[i]:.0f} s "
            f"ago, {self.restarts[i]} restart(s), {self.hung[i]} killed as hung"
            for i, spec in enumerate(self.specs)
        )

    def close(self, timeout: float = 10.0) -> None:
        ray = self._ray
        for handle in self.handles:
            if handle is not None:
                handle.stop.remote()
        runs = [r for r in self.runs if r is not None]
        if runs:
            ray.wait(runs, num_returns=len(runs), timeout=timeout)
        for _index, handle in enumerate(self.handles):
            if handle is None:
                continue
            with contextlib.suppress(Exception):
                self._leftover += ray.get(handle.drain.remote(), timeout=5.0)[0]
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        self._closed = True

    def shutdown(self) -> None:
        """After the last checkpoint (which reads the server): stop Ray if this run
        started it."""
        self.server._counts()
        self.server.closed = True
        with contextlib.suppress(Exception):
            self._ray.kill(self.server.handle, no_restart=True)
        # why: no Ray object may outlive `ray.shutdown()` (see RayFleet.close).
        self.server.handle = None
        self.handles = [None] * len(self.handles)
        self.runs = [None] * len(self.runs)
        if self.owns_ray:
            self._ray.shutdown()
