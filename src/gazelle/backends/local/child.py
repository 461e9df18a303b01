"""The child's side of a `ProcessFleet`: its entry point (`child_main`), what a process gets
to talk to its fleet (`ChildLink`) and the helpers it builds from it (`ChildContext`: report
events, beat, see whether to stop; `run_work`: a `TaskFleet` process running the work it was
handed).

A child dies with its trainer, even blocked in an env or stopped (SIGSTOP): on Linux it asks
the kernel for SIGKILL when its parent goes (`die_with_parent`); everywhere, it also sees a
changed parent pid whenever it looks at the stop event (the only way on macOS, and only for
a child that still runs).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from gazelle.backends.collective import process_state
from gazelle.backends.local.channels import MAX_MESSAGE, Sender, fits
from gazelle.registrations import Registrations
from gazelle.runtime.interfaces import Work

#: `prctl` option: the signal this process gets when its parent thread ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Have the kernel SIGKILL this process when its parent ends (Linux `PR_SET_PDEATHSIG`);
    returns False when the parent (`parent_pid`) is already gone, True otherwise (also where
    the kernel cannot do it: there the parent-pid poll of `ChildContext` remains).

    SIGKILL, because it ends a stopped (SIGSTOP) or blocked child too. The kernel sends it
    when the *thread* that started this process ends, not its process: the fleet asks for
    it only for children started by the main thread (`ProcessFleet._start`), whose end is
    the process's.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl here: the poll remains
    # why: a parent that died before the call above left us re-parented, and the kernel
    # will never signal us for it; only the pid tells.
    return os.getppid() == parent_pid


def lead_own_group() -> None:
    """Make this process the leader of a process group of its own.

    why: what the child starts joins the group, and some of it outlives the child: a
    ViZDoom env's engine is a process that stayed alive (for at least a minute, seemingly
    for good) after its parent was SIGKILLed, so every actor killed as hung left 8 engines
    behind. `kill_group` ends the whole group. Ctrl-C in a terminal then reaches only the
    trainer, which stops the children through the stop event.
    """
    # not allowed here (or no process groups): the child alone is killed
    with contextlib.suppress(OSError, AttributeError):
        os.setpgid(0, 0)


def kill_group(pid: int | None) -> None:
    """SIGKILL what is left of the process group `pid` leads (`lead_own_group`): the
    child if alive, and anything it started; nothing if the group is gone."""
    if pid is None:
        return
    # no such group (every member gone) or no process groups here: nothing to do
    with contextlib.suppress(OSError, AttributeError):
        os.killpg(pid, signal.SIGKILL)


def is_stopped(pid: int | None) -> bool:
    """Whether process `pid` is stopped by a signal (SIGSTOP): it cannot end by itself, and
    a SIGTERM stays pending in it; only SIGKILL ends it. (A tracer's stop, state t, is not
    counted: a profiler such as py-spy stops its process for moments at a time.)"""
    return process_state(pid) == "T"


def join_unless_stopped(process: Any, deadline: float, poll_s: float = 0.1) -> None:
    """Wait for `process` to end, until `deadline` (`time.monotonic()`), but not for one
    that is stopped (`is_stopped`): it will not end however long it is given.

    why: a run that ends with a stopped child (a learner that waited out
    --batch-timeout-s for actors stopped with SIGSTOP) waited out the whole grace period
    for it, then SIGTERM's 2 s, before the SIGKILL that ends it."""
    while process.is_alive() and not is_stopped(process.pid):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        process.join(min(poll_s, left))  # why: returns as soon as the process ends


def child_main(
    registrations: Registrations,
    target: Callable[..., None],
    args: tuple[Any, ...],
    parent_pid: int | None = None,
) -> None:
    """Every child process starts here: first, when `parent_pid` is given, it arranges to
    die with that parent (`die_with_parent`; it returns at once if the parent is gone); then
    the parent's registered torsos and envs (`gazelle.registrations`); then `target(*args)`."""
    if parent_pid is not None and not die_with_parent(parent_pid):
        return
    lead_own_group()
    # why: a spawned child imports gazelle afresh; what the user registered in the parent
    # (perhaps under `if __name__ == "__main__":`, which the child does not run) must be in
    # place before the child builds its agent or its envs.
    registrations.restore()
    target(*args)
    end_now()


def end_now() -> None:
    """End this child, its work done: its exit handlers run (`atexit`: multiprocessing's
    own clean-up, Python's logging, what an env registered), its output is flushed, and the
    interpreter's teardown is skipped, as multiprocessing's forked children skip it.

    why: that teardown frees the modules of torch one by one: 0.3 s on an idle core, 0.7 s
    on a busy one (measured), and the end of every run waits for it in each of its
    processes (`ProcessFleet.close` joins them). A child that raised takes the usual way
    out (its traceback, exit code 1)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


@dataclasses.dataclass
class ChildLink:
    """What a child process gets to talk to its fleet (picklable)."""

    stop: Any
    event_writer: Any
    heartbeats: torch.Tensor
    index: int
    #: The fleet's process (None: the parent this child sees at its start).
    parent_pid: int | None = None


class ChildContext:
    """In the child: `report(event)`, `beat()`, `should_stop()` (and `waiting()`, which
    beats too, for any loop that waits on something else)."""

    def __init__(self, link: ChildLink) -> None:
        self.link = link
        self.report = event_sender(link.event_writer)
        self._parent = link.parent_pid if link.parent_pid is not None else os.getppid()

    def should_stop(self) -> bool:
        # why: a trainer killed with SIGKILL never sets the stop event; an orphan is
        # re-parented, so a changed parent pid means the run is gone.
        return bool(self.link.stop.is_set()) or os.getppid() != self._parent

    def beat(self) -> None:
        self.link.heartbeats[self.link.index] = time.monotonic()

    def waiting(self) -> bool:
        """`should_stop()` for wait loops: a process waiting is not hung, so it beats."""
        self.beat()
        return self.should_stop()


def run_work(work: Work, spec: Any, link: ChildLink, *args: Any) -> None:
    """A `TaskFleet` process: `work(spec, context, *args)`, its `context` this process's
    `ChildContext` (a `gazelle.runtime.interfaces.WorkerContext`)."""
    work(spec, ChildContext(link), *args)


def event_sender(conn: Any) -> Callable[[dict[str, Any]], None]:
    """A child's `report`: sends events through its own pipe without ever blocking (see
    `gazelle.backends.local.channels`); an unroll event too big for one atomic message goes
    as several, its episodes split among them; a fault's message is cut to fit."""
    sender = Sender(conn)

    def report(event: dict[str, Any]) -> None:
        if fits(event):
            sender.send(event)
        elif len(event.get("episodes", ())) > 1:
            half = len(event["episodes"]) // 2
            report({**event, "episodes": event["episodes"][:half]})
            # why: the rest of the event (timings, counts, metrics) goes once, with part 1.
            report({"type": event["type"], "level_id": event.get("level_id", 0),
                    "episodes": event["episodes"][half:]})  # fmt: skip
        elif isinstance(event.get("message"), str) and len(event["message"]) > 200:
            report({**event, "message": "..." + event["message"][-(MAX_MESSAGE // 2) :]})
        else:
            sender.send(event)  # counted as dropped if it still does not fit

    return report
