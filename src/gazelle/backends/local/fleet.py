"""The local fleet: actors as processes on this machine, supervised and restarted on death.

The actor code is `gazelle.runtime.actor`; this module only starts, watches and stops the
processes (`actor_process` is their entry point: it wires the actor to the shared-memory
transport). Processes start with `spawn` (never a bare fork of a process that already runs
torch threads: a known source of silent deadlocks), so the same code runs on macOS.

With central inference it also starts the `InferenceServer` (a thread of this process) and
watches it: a dead server fails the run with its traceback rather than being restarted,
since it shares the learner's process and its death means a bug (or an out-of-memory
device), not a flaky env.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import time
import traceback
from typing import Any

import torch
import torch.multiprocessing as mp

from gazelle.backends.local.buffers import UnrollBuffers
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
)
from gazelle.backends.local.params import ParamStore
from gazelle.runtime.actor import Actor, ActorSpec, actor_agent
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.policy import CentralPolicy, LocalPolicy, Policy, PolicyStopped

#: Seed offset per restart, so a restarted actor does not replay the same episodes.
RESTART_SEED_STRIDE = 100_003


#: Events an actor may queue before the loop drains them (one per unroll, plus faults);
#: beyond it, events are dropped rather than block the actor.
EVENT_QUEUE_SIZE = 10_000


def make_policy(
    spec: ActorSpec, params: ParamStore, channels: InferenceChannels | None, stop: Any
) -> Policy:
    """A `CentralPolicy` on `channels` when given (central inference), else a `LocalPolicy`."""
    if channels is not None:
        client = SharedMemoryInferenceClient(
            channels, spec.actor_id, stop.is_set, spec.response_timeout_s
        )
        return CentralPolicy(client, spec.envs_per_actor)
    return LocalPolicy(actor_agent(spec), params, spec.envs_per_actor)


def actor_process(
    spec: ActorSpec,
    buffers: UnrollBuffers,
    params: ParamStore,
    stop: Any,
    events: Any,
    channels: InferenceChannels | None = None,
) -> None:
    """Entry point of an actor process; `channels`: central inference."""
    # why: one torch thread per actor process; two threads per process on a shared core
    # ran 10-250x slower (DESIGN.md measurements).
    torch.set_num_threads(1)
    keep_freed_memory()
    torch.manual_seed(spec.seed)

    def report(event: dict[str, Any]) -> None:
        # why: a full event queue must never stop an actor.
        with contextlib.suppress(Exception):
            events.put_nowait(event)

    actor = None
    try:
        actor = Actor(spec, buffers, make_policy(spec, params, channels, stop), report)
        actor.run(stop.is_set)
    except (KeyboardInterrupt, PolicyStopped):
        pass
    except Exception:
        report({"type": "actor_crash", "actor": spec.actor_id, "message": traceback.format_exc()})
        raise
    finally:
        if actor is not None:
            actor.close()


class LocalFleet:
    """Starts one process per `ActorSpec`; `poll()` restarts the dead ones (implements
    `gazelle.runtime.interfaces.Fleet`)."""

    def __init__(
        self,
        specs: list[ActorSpec],
        buffers: UnrollBuffers,
        params: ParamStore,
        ctx: Any | None = None,
        max_restarts: int = 100,
        channels: InferenceChannels | None = None,
        server: InferenceServer | None = None,
        stop_event: Any | None = None,
    ) -> None:
        self.ctx = ctx or mp.get_context("spawn")
        self.specs = list(specs)
        self.buffers, self.params = buffers, params
        self.channels, self.server = channels, server
        # why: one stop event for actors and server (the server is built with it).
        self.stop_event = stop_event if stop_event is not None else self.ctx.Event()
        # why: bounded; actors drop events rather than block when nobody reads them.
        self.events = self.ctx.Queue(maxsize=EVENT_QUEUE_SIZE)
        self.processes: list[Any] = [None] * len(self.specs)
        self.restarts = [0] * len(self.specs)
        self.max_restarts = max_restarts
        self.dropped_slots = 0
        self._leftover: list[dict[str, Any]] = []
        self._closed = False

    def _start(self, index: int) -> None:
        spec = self.specs[index]
        if self.restarts[index]:
            spec = dataclasses.replace(
                spec, seed=spec.seed + RESTART_SEED_STRIDE * self.restarts[index]
            )
        process = self.ctx.Process(
            target=actor_process,
            args=(spec, self.buffers, self.params, self.stop_event, self.events, self.channels),
            name=f"gazelle-actor-{spec.actor_id}",
            daemon=True,
        )
        process.start()
        self.processes[index] = process

    def start(self) -> None:
        if self.server is not None:
            self.server.start()
        for index in range(len(self.specs)):
            self._start(index)

    def check(self) -> None:
        """Raise RuntimeError (with its traceback) if the inference server died."""
        server = self.server
        if server is None or self.stop_event.is_set() or server.alive():
            return
        raise RuntimeError(
            "the central inference server died; the run cannot go on (use --inference local "
            f"to avoid it):\n{server.error or 'no traceback (it stopped without an error)'}"
        )

    def stats(self) -> dict[str, float]:
        """The server's batching statistics (empty with local inference)."""
        return self.server.stats() if self.server is not None else {}

    def poll(self) -> list[dict[str, Any]]:
        """Restart dead actors; return the events (telemetry, crashes, restarts, env errors)
        since the last call (after `close`, the ones that were still queued)."""
        events, self._leftover = self._drain() + self._leftover, []
        if self.stop_event.is_set():
            return events
        self.check()
        for index, process in enumerate(self.processes):
            if process is None or process.is_alive():
                continue
            actor_id = self.specs[index].actor_id
            # why: free the dead actor's half-written slots before its successor starts
            # writing to the same slots; nothing it wrote half is ever handed to the learner.
            dropped = self.buffers.release_actor(actor_id)
            self.dropped_slots += dropped
            self.restarts[index] += 1
            events.append(
                {
                    "type": "actor_restart",
                    "actor": actor_id,
                    "exitcode": process.exitcode,
                    "dropped_slots": dropped,
                    "restarts": self.restarts[index],
                }
            )
            if self.restarts[index] > self.max_restarts:
                raise RuntimeError(
                    f"actor {actor_id} died {self.restarts[index]} times (last exit code "
                    f"{process.exitcode}); giving up. See the actor_crash events in the log."
                )
            self._start(index)
        return events

    def alive(self) -> int:
        return sum(1 for p in self.processes if p is not None and p.is_alive())

    def close(self, timeout: float = 10.0) -> None:
        """Ask actors to stop, then terminate whoever did not."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is not None:
                process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process is not None and process.is_alive():
                process.terminate()
                process.join(timeout=2.0)
            if process is not None and process.is_alive():
                process.kill()
                process.join(timeout=2.0)
        if self.server is not None:
            # why: after the actors: none is left waiting on it, and it sees the stop event.
            self.server.close(timeout=max(1.0, deadline - time.monotonic()))
        # why: what actors sent before they stopped (finished episodes) is kept for a last
        # poll; the queue's feeder thread must be drained before the queue can be closed.
        self._leftover += self._drain()
        self._closed = True
        self.events.close()
        self.events.join_thread()

    def _drain(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._closed:
            return events
        while True:
            try:
                events.append(self.events.get_nowait())
            except (queue.Empty, OSError, EOFError, ValueError):
                return events
