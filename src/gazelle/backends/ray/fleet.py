"""IMPALA's actors on a Ray cluster: one Ray actor per gazelle actor, unrolls through the
object store, weights put once per new version and fetched by reference.

A pump thread on the driver keeps every actor busy: each actor has at most `slots_per_env`
unroll calls outstanding or unconsumed (the local backend's slots, here as a count), and
finished unrolls wait, one per env, for the learner's `batches`. An actor whose process
died (a kill -9, a lost node) or whose call raised is replaced by a new Ray actor with a
fresh seed and a fresh LSTM state; its unfinished unroll is simply never returned, so
nothing half-written reaches the learner. An actor silent for `actor_timeout_s` is killed
and replaced the same way.
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
from torch import nn

from gazelle import registrations
from gazelle.backends.local.layout import is_state
from gazelle.backends.local.params import flatten
from gazelle.backends.local.process import RESTART_SEED_STRIDE
from gazelle.backends.ray.hosts import ActorHost
from gazelle.runtime.actor import ActorSpec


class RayParams:
    """The learner's `ParamPublisher`: `publish` keeps a CPU copy; the pump `ray.put`s it
    once, when it next hands work to an actor, and every actor fetches that one object."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flat: np.ndarray | None = None
        self._version = -1
        self._ref: Any = None
        self._ref_version = -2
        self.puts = 0

    def publish(self, module: nn.Module, version: int) -> None:
        flat = flatten(module).numpy()
        with self._lock:
            self._flat, self._version = flat, version

    def forget(self) -> None:
        """Drop the object reference (before Ray shuts down)."""
        with self._lock:
            self._ref, self._ref_version = None, -2

    def latest(self) -> tuple[list[Any], int]:
        """`([ref], version)` of the newest weights (put now if not yet in the store)."""
        import ray

        with self._lock:
            if self._ref_version != self._version and self._flat is not None:
                self._ref, self._ref_version = ray.put(self._flat), self._version
                self.puts += 1
            return [self._ref], self._ref_version


class RayFleet:
    """Implements `Fleet` and `BatchSource` (see module docstring).

    Args:
        specs: one per actor.
        params: the weights the actors act with.
        slots_per_env: unrolls per env an actor may have outstanding or unconsumed.
        cpus_per_actor: CPUs each Ray actor declares.
        actor_timeout_s: an actor with a call outstanding and no unroll back for this long
            is killed and replaced.
        owns_ray: shut Ray down on `close` (this run started it).
        server: the central inference server's Ray actor (None: actors act on their own
            copies).
    """

    def __init__(
        self,
        specs: list[ActorSpec],
        params: RayParams,
        slots_per_env: int,
        cpus_per_actor: float = 1.0,
        actor_timeout_s: float = 120.0,
        max_restarts: int = 100,
        owns_ray: bool = False,
        server: Any = None,
    ) -> None:
        from gazelle.backends.ray.cluster import require_ray

        ray = self._ray = require_ray()
        self.specs, self.params = list(specs), params
        self.calls_per_actor = slots_per_env
        self.actor_timeout_s, self.max_restarts = actor_timeout_s, max_restarts
        self.owns_ray, self.server = owns_ray, server
        self._server_version = -1
        self._remote = ray.remote(num_cpus=cpus_per_actor, max_restarts=0)(ActorHost)
        self._registrations = registrations.capture()
        n = len(self.specs)
        self.handles: list[Any] = [None] * n
        self.restarts, self.hung = [0] * n, [0] * n
        self.dropped_slots = 0
        # why: one condition guards what the pump thread and the learner's thread share:
        # the finished unrolls, each actor's outstanding count, the events, the error.
        self._cond = threading.Condition()
        self._ready: collections.deque[tuple[dict[str, Any], int]] = collections.deque()
        self._held = [0] * n  # unrolls per actor outstanding or waiting for the learner
        self._in_flight: dict[Any, int] = {}  # call ref -> actor index
        self._progress = [time.monotonic()] * n  # last unroll back (or start)
        self._events: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.get_s, self.unrolls_in = 0.0, 0

    # ---- life cycle -------------------------------------------------------------------
    def _spawn(self, index: int) -> None:
        spec = self.specs[index]
        if self.restarts[index]:
            # why: a replacement must not replay its predecessor's episodes.
            seed = spec.seed + RESTART_SEED_STRIDE * self.restarts[index]
            spec = dataclasses.replace(spec, seed=seed)
        self.handles[index] = self._remote.remote(self._registrations, spec, self.server)
        self._progress[index] = time.monotonic()

    def start(self) -> None:
        for index in range(len(self.specs)):
            self._spawn(index)
        self._pump_thread = threading.Thread(target=self._pump_guarded, name="ray-pump")
        self._pump_thread.daemon = True
        self._pump_thread.start()

    def _replace(self, index: int, event: dict[str, Any]) -> None:
        """Kill actor `index` (if still there), drop its outstanding calls, start anew."""
        ray = self._ray
        lost = [ref for ref, i in self._in_flight.items() if i == index]
        for ref in lost:
            del self._in_flight[ref]
        envs = self.specs[index].envs_per_actor
        with self._cond:
            self._held[index] -= envs * len(lost)
            self.dropped_slots += envs * len(lost)
        with contextlib.suppress(Exception):  # already gone with its node
            ray.kill(self.handles[index], no_restart=True)
        self.restarts[index] += 1
        actor_id = self.specs[index].actor_id
        with self._cond:
            self._events.append(
                {"type": "actor_restart", "actor": actor_id, "restarts": self.restarts[index],
                 "dropped_slots": envs * len(lost), **event}
            )  # fmt: skip
        if self.restarts[index] > self.max_restarts:
            raise RuntimeError(
                f"actor {actor_id} died {self.restarts[index]} times; giving up (see the "
                "crash events in the log)"
            )
        self._spawn(index)

    # ---- the pump (its own thread) ----------------------------------------------------
    def _pump_guarded(self) -> None:
        try:
            self._pump()
        except BaseException as error:  # surfaced by check() on the loop's thread
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def _submit(self) -> None:
        for index, handle in enumerate(self.handles):
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
            self._submit()
            refs = list(self._in_flight)
            if not refs:
                time.sleep(0.01)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.1)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                self._collect(ref)
            self._kill_hung()

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        index = self._in_flight.pop(ref, None)
        if index is None:
            return
        t0 = time.perf_counter()
        try:
            result = ray.get(ref)
        except ray.exceptions.RayActorError as error:
            self._in_flight[ref] = index  # dropped with the others by _replace
            self._replace(index, {"reason": "actor process died", "message": str(error)[:500]})
            return
        except ray.exceptions.RayTaskError as error:
            self._in_flight[ref] = index
            with self._cond:
                self._events.append(
                    {"type": "actor_crash", "actor": self.specs[index].actor_id,
                     "message": str(error)[-2000:]}
                )  # fmt: skip
            self._replace(index, {"reason": "unroll raised"})
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

    def _kill_hung(self) -> None:
        now = time.monotonic()
        busy = set(self._in_flight.values())
        for index in busy:
            silent = now - self._progress[index]
            if silent > self.actor_timeout_s:
                self.hung[index] += 1
                with self._cond:
                    self._events.append(
                        {"type": "actor_hung", "actor": self.specs[index].actor_id,
                         "silent_s": silent}
                    )  # fmt: skip
                self._replace(index, {"reason": "hung"})

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
        """Raise if the pump thread failed or (central inference) the server died."""
        with self._cond:
            error = self._error
        if self._stop.is_set():
            return
        if error is not None:
            raise RuntimeError(f"the Ray backend's pump failed: {error!r}") from error
        if self.server is not None:
            ready, _ = self._ray.wait([self.server.stats.remote()], timeout=30.0)
            try:
                self._ray.get(ready)
            except self._ray.exceptions.RayActorError as died:
                raise RuntimeError(
                    "the central inference server died; the run cannot go on (use "
                    "--inference local to avoid it)"
                ) from died

    def supervise(self) -> None:
        """The pump thread replaces dead and hung actors as it goes; this only re-raises
        its failure."""
        self.check()

    def stats(self) -> dict[str, float]:
        """Transport costs (ms of `ray.get` per env's unroll on the driver, weight puts)
        and, with central inference, the server's batches (as the local server's)."""
        per_unroll = self.get_s / self.unrolls_in if self.unrolls_in else 0.0
        out = {"ray/get_ms_per_unroll": 1000.0 * per_unroll, "ray/weight_puts": self.params.puts}
        if self.server is not None:
            with contextlib.suppress(Exception):
                out.update(self._ray.get(self.server.stats.remote(), timeout=5.0))
        return out

    def describe(self) -> str:
        now = time.monotonic()
        busy = collections.Counter(self._in_flight.values())
        return "\n".join(
            f"actor {spec.actor_id}: Ray actor, {busy.get(i, 0)} call(s) outstanding, last "
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
        for handle in [*self.handles, self.server]:
            if handle is not None:
                with contextlib.suppress(Exception):
                    self._ray.kill(handle, no_restart=True)
        # why: drop every Ray object this fleet holds (call refs, results backed by the
        # object store, actor handles, the weights' ref) while Ray is up: freeing one after
        # `ray.shutdown()` makes Ray's core worker exit the whole process (seen in
        # benchmarks/ray_scaling.py, which shuts its cluster down after each run).
        with self._cond:
            self._in_flight.clear()
            self._ready.clear()
        self.handles = [None] * len(self.handles)
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
