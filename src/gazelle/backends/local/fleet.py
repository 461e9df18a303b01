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

import dataclasses
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp

from gazelle.backends.local.buffers import UnrollBuffers
from gazelle.backends.local.channels import MAX_MESSAGE, Sender, fits, receive_all
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


def event_sender(conn: Any) -> Callable[[dict[str, Any]], None]:
    """An actor's `report`: sends events through its own pipe without ever blocking (see
    `gazelle.backends.local.channels`); an unroll event too big for one atomic message goes
    as several, its episodes split among them; a fault's message is cut to fit."""
    sender = Sender(conn)

    def report(event: dict[str, Any]) -> None:
        if fits(event):
            sender.send(event)
        elif event.get("type") == "unroll" and len(event["episodes"]) > 1:
            half = len(event["episodes"]) // 2
            report({**event, "episodes": event["episodes"][:half]})
            # why: the timing and counts go once, with the first part.
            report({**event, "episodes": event["episodes"][half:], "timing": (),
                    "action_counts": []})  # fmt: skip
        elif isinstance(event.get("message"), str) and len(event["message"]) > 200:
            report({**event, "message": "..." + event["message"][-(MAX_MESSAGE // 2) :]})
        else:
            sender.send(event)  # counted as dropped if it still does not fit

    return report


def make_policy(
    spec: ActorSpec,
    params: ParamStore,
    channels: InferenceChannels | None,
    should_stop: Callable[[], bool],
) -> Policy:
    """A `CentralPolicy` on `channels` when given (central inference), else a `LocalPolicy`."""
    if channels is not None:
        client = SharedMemoryInferenceClient(
            channels, spec.actor_id, should_stop, spec.response_timeout_s
        )
        return CentralPolicy(client, spec.envs_per_actor)
    return LocalPolicy(actor_agent(spec), params, spec.envs_per_actor)


def actor_process(
    spec: ActorSpec,
    buffers: UnrollBuffers,
    params: ParamStore,
    stop: Any,
    slot_writer: Any,
    event_writer: Any,
    channels: InferenceChannels | None = None,
    heartbeats: torch.Tensor | None = None,
    index: int = 0,
) -> None:
    """Entry point of an actor process. `slot_writer` / `event_writer`: this process's ends of
    its own pipes (committed slots, events); `channels`: central inference;
    `heartbeats[index]`: where it writes the time of its last sign of life."""
    # why: one torch thread per actor process; two threads per process on a shared core
    # ran 10-250x slower (DESIGN.md measurements).
    torch.set_num_threads(1)
    keep_freed_memory()
    torch.manual_seed(spec.seed)
    buffers.attach(slot_writer)
    report = event_sender(event_writer)
    parent = os.getppid()

    def should_stop() -> bool:
        # why: a learner killed with SIGKILL never sets the stop event; an orphan is
        # re-parented, so a changed parent pid means the run is gone.
        return stop.is_set() or os.getppid() != parent

    def beat() -> None:
        if heartbeats is not None:
            heartbeats[index] = time.monotonic()

    actor = None
    try:

        def waiting() -> bool:
            # why: an actor waiting for the inference server is not hung: beat meanwhile.
            beat()
            return should_stop()

        policy = make_policy(spec, params, channels, waiting)
        actor = Actor(spec, buffers, policy, report, beat)
        actor.run(should_stop)
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
        actor_timeout_s: float = 120.0,
    ) -> None:
        """`actor_timeout_s`: an actor silent (no step, no wait) for this long is taken to
        be hung (SIGSTOPped, an env that blocks forever): killed and replaced."""
        self.ctx = ctx or mp.get_context("spawn")
        self.specs = list(specs)
        self.buffers, self.params = buffers, params
        self.channels, self.server = channels, server
        # why: one stop event for actors and server (the server is built with it).
        self.stop_event = stop_event if stop_event is not None else self.ctx.Event()
        # why: one pipe per actor process, never shared: see gazelle.backends.local.channels.
        self.event_readers: list[Any] = [None] * len(self.specs)
        self.processes: list[Any] = [None] * len(self.specs)
        self.restarts = [0] * len(self.specs)
        self.max_restarts = max_restarts
        self.dropped_slots = 0
        self._leftover: list[dict[str, Any]] = []
        self._closed = False
        self.actor_timeout_s = actor_timeout_s
        # why: shared, so that actors write their last sign of life where the fleet reads it;
        # CLOCK_MONOTONIC is one clock for every process of the machine.
        self.heartbeats = torch.zeros(len(self.specs), dtype=torch.float64).share_memory_()
        self.hung = [0] * len(self.specs)

    def _start(self, index: int) -> None:
        spec = self.specs[index]
        if self.restarts[index]:
            spec = dataclasses.replace(
                spec, seed=spec.seed + RESTART_SEED_STRIDE * self.restarts[index]
            )
        slot_writer = self.buffers.open_channel(spec.actor_id)
        event_reader, event_writer = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(
            target=actor_process,
            args=(
                spec,
                self.buffers,
                self.params,
                self.stop_event,
                slot_writer,
                event_writer,
                self.channels,
                self.heartbeats,
                index,
            ),
            name=f"gazelle-actor-{spec.actor_id}",
            daemon=True,
        )
        # why: the clock starts at the start, so a process that never beats (stuck while
        # building its envs) is found too.
        self.heartbeats[index] = time.monotonic()
        process.start()
        # why: the child has its own copies; closing ours lets a reader see the end of
        # file when the child dies.
        slot_writer.close()
        event_writer.close()
        old = self.event_readers[index]
        if old is not None:
            # why: the predecessor's last whole events (its crash report) still count.
            self._leftover += receive_all(old)[0]
            old.close()
        self.event_readers[index] = event_reader
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
        events += self._kill_hung()
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

    def _kill_hung(self) -> list[dict[str, Any]]:
        """SIGKILL every live actor silent for more than `actor_timeout_s` (it is replaced
        as a dead one right after); one "actor_hung" event each."""
        events: list[dict[str, Any]] = []
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            silent = now - float(self.heartbeats[index])
            if process is None or silent <= self.actor_timeout_s or not process.is_alive():
                continue
            # why: SIGKILL ends a stopped (SIGSTOP) process too, and a blocked one.
            process.kill()
            process.join(timeout=5.0)
            self.hung[index] += 1
            events.append(
                {"type": "actor_hung", "actor": self.specs[index].actor_id, "silent_s": silent}
            )
        return events

    def describe(self) -> str:
        """One line per actor: alive or dead, seconds since its last sign of life, restarts."""
        now = time.monotonic()
        lines = []
        for index, process in enumerate(self.processes):
            state = (
                "not started"
                if process is None
                else ("alive" if process.is_alive() else f"dead (exit code {process.exitcode})")
            )
            silent = now - float(self.heartbeats[index])
            lines.append(
                f"actor {self.specs[index].actor_id}: {state}, last sign of life {silent:.0f} s "
                f"ago, {self.restarts[index]} restart(s), {self.hung[index]} killed as hung"
            )
        return "\n".join(lines)

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
        # poll.
        self._leftover += self._drain()
        self._closed = True
        for reader in self.event_readers:
            if reader is not None:
                reader.close()

    def _drain(self) -> list[dict[str, Any]]:
        """Every whole event waiting in the actors' pipes."""
        events: list[dict[str, Any]] = []
        if self._closed:
            return events
        for reader in self.event_readers:
            if reader is not None:
                events += receive_all(reader)[0]
        return events
