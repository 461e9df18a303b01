"""Processes of a run on this machine, whatever they do (IMPALA actors, A3C workers):
started with `spawn`, watched by heartbeat, restarted when they die or hang, each with its
own event pipe.

Processes start with `spawn` (never a bare fork of a process that already runs torch
threads: a known source of silent deadlocks), so the same code runs on macOS. A subclass
says what each process runs (`_target`, `_args`) and what to clean up when one dies
(`_on_death`). Every child starts in `child_main`, which first replays the parent's
registered torsos and envs (`gazelle.registrations`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp

from gazelle import registrations
from gazelle.backends.local.channels import StopFlag, receive_all
from gazelle.backends.local.child import (
    ChildLink,
    child_main,
    is_stopped,
    join_unless_stopped,
    kill_group,
    run_work,
)
from gazelle.runtime.interfaces import Work
from gazelle.runtime.restarts import RESTART_SEED_STRIDE, FailedStarts

#: Seconds a new process may take to its first heartbeat (import torch, build its envs)
#: before it is taken to be hung, when that is longer than `actor_timeout_s`: a short
#: timeout for a running actor must not kill every replacement while it starts on a busy
#: machine.
START_TIMEOUT_S = 120.0


class ProcessFleet:
    """One process per spec (each spec has `actor_id` and `seed`); `poll()` replaces the
    dead and the hung ones. Implements `gazelle.runtime.interfaces.Fleet`.

    Args:
        specs: one per process.
        ctx: a `spawn` multiprocessing context.
        stop_event: set to ask every process to stop (`close()` sets it); a `StopFlag`
            (never a `multiprocessing.Event`, which a killed process can wedge).
        actor_timeout_s: a process silent (no heartbeat) for this long is taken to be hung
            (SIGSTOPped, blocked forever): killed and replaced. Before its first heartbeat
            it has `max(actor_timeout_s, START_TIMEOUT_S)`.
        max_restarts: per process, before the run gives up.
    """

    kind = "actor"

    def __init__(
        self,
        specs: list[Any],
        ctx: Any | None = None,
        stop_event: Any | None = None,
        actor_timeout_s: float = 120.0,
        max_restarts: int = 100,
    ) -> None:
        self.ctx = ctx or mp.get_context("spawn")
        self.specs = list(specs)
        self.stop_event = stop_event if stop_event is not None else StopFlag()
        # why: one pipe per process, never shared: see gazelle.backends.local.channels.
        self.event_readers: list[Any] = [None] * len(self.specs)
        self.processes: list[Any] = [None] * len(self.specs)
        self.restarts = [0] * len(self.specs)
        self.hung = [0] * len(self.specs)
        self.failed_starts = FailedStarts(len(self.specs))
        self.max_restarts = max_restarts
        self.actor_timeout_s = actor_timeout_s
        self.dropped_slots = 0
        # why: shared, so that children write their last sign of life where the fleet reads
        # it; CLOCK_MONOTONIC is one clock for every process of the machine.
        self.heartbeats = torch.zeros(len(self.specs), dtype=torch.float64).share_memory_()
        self.started_at = [0.0] * len(self.specs)
        self._leftover: list[dict[str, Any]] = []
        self._closed = False

    # ---- what a subclass says ---------------------------------------------------------
    def _target(self) -> Callable[..., None]:
        raise NotImplementedError

    def _args(self, index: int, spec: Any, link: ChildLink) -> tuple[Any, ...]:
        """The child's arguments (it also needs `link`); may create per-process pipes and
        return the ends to close in this process in `self._to_close`."""
        raise NotImplementedError

    def _on_death(self, index: int) -> dict[str, Any]:
        """Clean up after process `index` died; extra fields for its restart event."""
        return {}

    def check(self) -> None:
        """Raise if a part the run cannot go on without has died."""

    def stats(self) -> dict[str, float]:
        return {}

    # ---- life cycle -------------------------------------------------------------------
    def _start(self, index: int) -> None:
        spec = self.specs[index]
        if self.restarts[index]:
            spec = dataclasses.replace(
                spec, seed=spec.seed + RESTART_SEED_STRIDE * self.restarts[index]
            )
        event_reader, event_writer = self.ctx.Pipe(duplex=False)
        link = ChildLink(self.stop_event, event_writer, self.heartbeats, index, os.getpid())
        self._to_close: list[Any] = [event_writer]
        # why: the kernel's parent-death signal follows the thread that starts the child,
        # so a child started by another thread (which may end before the run) must not ask
        # for it; such a child still sees a changed parent pid (ChildContext.should_stop).
        main = threading.current_thread() is threading.main_thread()
        process = self.ctx.Process(
            target=child_main,
            args=(
                registrations.capture(),
                self._target(),
                self._args(index, spec, link),
                os.getpid() if main else None,
            ),
            name=f"gazelle-{self.kind}-{spec.actor_id}",
            daemon=True,
        )
        # why: the clock starts at the start, so a process that never beats (stuck while
        # building its envs) is found too.
        self.started_at[index] = self.heartbeats[index] = time.monotonic()
        process.start()
        # why: the child has its own copies; closing ours lets a reader see the end of
        # file when the child dies.
        for end in self._to_close:
            end.close()
        old = self.event_readers[index]
        if old is not None:
            # why: the predecessor's last whole events (its crash report) still count.
            self._leftover += receive_all(old)[0]
            old.close()
        self.event_readers[index] = event_reader
        self.processes[index] = process

    def start(self) -> None:
        for index in range(len(self.specs)):
            self._start(index)

    def supervise(self) -> None:
        """Replace dead and hung processes now, keeping their events for the next `poll`.

        why: the loop polls after each batch; while it waits for one (e.g. its only actor
        died before the first batch), this is what restarts the actors it waits for.
        """
        self._leftover = self.poll()

    def poll(self) -> list[dict[str, Any]]:
        """Replace dead and hung processes; return the events since the last call (after
        `close`, the ones that were still waiting)."""
        events, self._leftover = self._drain() + self._leftover, []
        if self.stop_event.is_set():
            return events
        self.check()
        events += self._kill_hung()
        for index, process in enumerate(self.processes):
            if process is None or process.is_alive():
                continue
            actor_id = self.specs[index].actor_id
            # why: a child that crashed leaves what it started (a ViZDoom engine) behind.
            kill_group(process.pid)
            extra = self._on_death(index)
            self.restarts[index] += 1
            # why: until its first beat the heartbeat still holds the start time (`_start`)
            early = float(self.heartbeats[index]) <= self.started_at[index]
            self.failed_starts.record(index, early, f"{self.kind} {actor_id}", process.exitcode)
            events.append(
                {
                    "type": "actor_restart",
                    "actor": actor_id,
                    "exitcode": process.exitcode,
                    "restarts": self.restarts[index],
                    **extra,
                }
            )
            if self.restarts[index] > self.max_restarts:
                raise RuntimeError(
                    f"{self.kind} {actor_id} died {self.restarts[index]} times (last exit code "
                    f"{process.exitcode}); giving up. See the crash events in the log."
                )
            self._start(index)
        return events

    def _kill_hung(self) -> list[dict[str, Any]]:
        """SIGKILL every live process silent for more than `actor_timeout_s` (one that has
        not beaten yet: the start allowance), replaced as a dead one right after; one
        "actor_hung" event each."""
        events: list[dict[str, Any]] = []
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            last = float(self.heartbeats[index])
            # why: until its first beat the heartbeat still holds the start time.
            limit = self.actor_timeout_s
            if last <= self.started_at[index]:
                limit = max(self.actor_timeout_s, START_TIMEOUT_S)
            silent = now - last
            if process is None or silent <= limit or not process.is_alive():
                continue
            # why: SIGKILL ends a stopped (SIGSTOP) process too, and a blocked one; the
            # group, so that what it started (a ViZDoom engine) goes with it.
            process.kill()
            kill_group(process.pid)
            process.join(timeout=5.0)
            self.hung[index] += 1
            events.append(
                {"type": "actor_hung", "actor": self.specs[index].actor_id, "silent_s": silent}
            )
        return events

    def describe(self) -> str:
        """One line per process: alive or dead, seconds since its last sign of life,
        restarts."""
        now = time.monotonic()
        lines = []
        for index, process in enumerate(self.processes):
            if process is None:
                state = "not started"
            else:
                state = "alive" if process.is_alive() else f"dead (exit code {process.exitcode})"
            silent = now - float(self.heartbeats[index])
            lines.append(
                f"{self.kind} {self.specs[index].actor_id}: {state}, last sign of life "
                f"{silent:.0f} s ago, {self.restarts[index]} restart(s), {self.hung[index]} "
                "killed as hung"
            )
        return "\n".join(lines)

    def alive(self) -> int:
        return sum(1 for p in self.processes if p is not None and p.is_alive())

    def close(self, timeout: float = 10.0) -> None:
        """Ask every process to stop, then terminate whoever did not; a stopped one
        (SIGSTOP), which cannot stop itself, is killed without being waited for."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process is not None:
                join_unless_stopped(process, deadline)
        for process in self.processes:
            # why: a SIGTERM stays pending in a stopped process; only SIGKILL ends it
            if process is not None and process.is_alive() and not is_stopped(process.pid):
                process.terminate()
                process.join(timeout=2.0)
            if process is not None and process.is_alive():
                process.kill()
                process.join(timeout=2.0)
            if process is not None:
                kill_group(process.pid)  # why: whatever the child left running
        self._after_stop(deadline)
        # why: what the processes sent before they stopped (finished episodes) is kept for
        # a last poll.
        self._leftover += self._drain()
        self._closed = True
        for reader in self.event_readers:
            if reader is not None:
                reader.close()

    def _after_stop(self, deadline: float) -> None:
        """Stop what the processes used (e.g. a server), after they are gone."""

    def _drain(self) -> list[dict[str, Any]]:
        """Every whole event waiting in the processes' pipes."""
        events: list[dict[str, Any]] = []
        if self._closed:
            return events
        for reader in self.event_readers:
            if reader is not None:
                events += receive_all(reader)[0]
        return events


class TaskFleet(ProcessFleet):
    """Processes that run `work(spec, context, *args)`: the work an algorithm hands the
    backend (A3C's `run_worker`; a `gazelle.runtime.interfaces.Work`), with the fleet's
    supervision; `context` is the process's `ChildContext`."""

    kind = "worker"

    def __init__(
        self,
        specs: list[Any],
        work: Work,
        args: tuple[Any, ...],
        ctx: Any | None = None,
        actor_timeout_s: float = 120.0,
        max_restarts: int = 100,
    ) -> None:
        super().__init__(specs, ctx, None, actor_timeout_s, max_restarts)
        self.work, self.args = work, args

    def _target(self) -> Callable[..., None]:
        return run_work

    def _args(self, index: int, spec: Any, link: ChildLink) -> tuple[Any, ...]:
        return (self.work, spec, link, *self.args)
