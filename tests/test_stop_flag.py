"""A process killed while it looks at the run's stop signal does not wedge the run.

`multiprocessing.Event.is_set()` takes a lock; an actor SIGKILLed inside it left the lock
held, and the learner's next fleet poll (which looks at the same signal), then its
`close()`, blocked for good: a CI run hung in the test that SIGKILLs an actor. The fleets'
stop signal is now a lock-free `StopFlag`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time

import pytest

from gazelle.backends.local.channels import StopFlag
from gazelle.backends.local.process import TaskFleet

pytestmark = pytest.mark.slow

CTX = multiprocessing.get_context("spawn")


@dataclasses.dataclass(frozen=True)
class Spec:
    actor_id: int
    seed: int


def spin_on_the_stop_signal(spec: Spec, child) -> None:
    """In a spawned child: say so, then look at the stop signal as fast as it can (so that
    a SIGKILL lands inside the look most of the time). It beats once first: a child killed
    before its first heartbeat counts as a failed start, and three in a row stop the fleet
    (`TaskFleet`'s crash-loop rule), which is not what this test is about."""
    child.beat()
    child.report({"type": "spinning", "pid": os.getpid()})
    while not child.should_stop():
        pass


def finishes(fn, seconds: float):
    """(whether `fn()` returned within `seconds`, its result); a daemon thread, so a call
    blocked for good does not block the tests."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive()), (out[0] if out else None)


def wait_for_spinning(fleet: TaskFleet, after: set[int]) -> int:
    """The pid of the first child that reports it spins and is not in `after`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ok, events = finishes(fleet.poll, 10.0)
        assert ok, "the fleet's poll blocked: a killed child wedged the stop signal"
        for event in events:
            if event["type"] == "spinning" and event["pid"] not in after:
                return event["pid"]
        time.sleep(0.05)
    raise AssertionError("no child reported that it spins")


def test_children_killed_while_they_look_at_the_stop_signal_do_not_wedge_the_fleet():
    fleet = TaskFleet([Spec(0, 0), Spec(1, 1)], spin_on_the_stop_signal, ())
    fleet.start()
    killed: set[int] = set()
    try:
        # why: with the old Event about half the kills left its lock held; 8 kills leave
        # the old code a chance of 1 in 256 to pass.
        for _ in range(8):
            pid = wait_for_spinning(fleet, killed)
            time.sleep(0.2)  # why: deep in its loop, not in its first look
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        ok, _ = finishes(fleet.poll, 10.0)
        assert ok, "the fleet's poll blocked after the last kill"
    finally:
        closed, _ = finishes(fleet.close, 30.0)
    assert closed, "close() blocked: the stop signal is wedged"
    assert fleet.alive() == 0


def test_a_stopped_child_is_killed_at_close_without_waiting_out_the_grace_period():
    """A child stopped with SIGSTOP cannot see the stop signal, and a SIGTERM stays pending
    in it: `close()` kills it at once instead of giving it the whole grace period (here
    600 s; the default 10 s, then 2 s for the SIGTERM, at the end of every run whose
    learner gave up on stopped actors)."""
    fleet = TaskFleet([Spec(0, 0)], spin_on_the_stop_signal, ())
    fleet.start()
    try:
        pid = wait_for_spinning(fleet, set())
        os.kill(pid, signal.SIGSTOP)
    finally:
        closed, _ = finishes(lambda: fleet.close(timeout=600.0), 60.0)
    assert closed, "close() waited for a stopped child"
    assert fleet.alive() == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, not left behind


def test_the_flag_is_seen_by_a_child_and_set_by_one():
    flag, seen = StopFlag(), StopFlag()
    child = CTX.Process(target=_mirror, args=(flag, seen), daemon=True)
    child.start()
    try:
        assert not flag.is_set() and not seen.is_set()
        flag.set()
        deadline = time.monotonic() + 60
        while not seen.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen.is_set(), "the child never saw the flag, or its set never reached us"
    finally:
        child.join(10)
    assert child.exitcode == 0


def _mirror(flag: StopFlag, seen: StopFlag) -> None:
    """In a spawned child: wait for `flag`, then set `seen`."""
    while not flag.is_set():
        time.sleep(0.005)
    seen.set()
