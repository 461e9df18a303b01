"""The restart budget a fleet keeps per actor: a window of recent restarts, with backoff."""

from __future__ import annotations

import dataclasses
import time

import pytest

from gazelle.errors import RunError
from gazelle.runtime.restarts import RestartBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_within_the_window_and_caps():
    clock = Clock()
    budget = RestartBudget("actor 3", max_restarts=10, window_s=600, max_backoff_s=8, clock=clock)
    delays = [budget.record("died") for _ in range(7)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert budget.recent() == 7 and budget.total == 7


def test_a_spent_budget_stops_with_the_actor_and_the_last_reason():
    clock = Clock()
    budget = RestartBudget("actor 3", max_restarts=3, window_s=600, clock=clock)
    for _ in range(3):
        budget.record("RayActorError")
    with pytest.raises(RunError, match=r"^actor 3 was replaced 3 times in the last 600 s \(last: "
                       r"unroll raised\); giving up$"):  # fmt: skip
        budget.record("unroll raised")


def test_old_restarts_leave_the_window_so_rare_faults_never_add_up():
    """One lost node an hour for a day: never more than one restart in any window."""
    clock = Clock()
    budget = RestartBudget("actor 0", max_restarts=2, window_s=600, clock=clock)
    for _ in range(24):
        assert budget.record("node lost") == 0.0  # the first in its window: no wait
        clock.now += 3600
    assert budget.total == 24 and budget.recent() == 0


def test_three_deaths_in_a_row_before_a_first_heartbeat_stop_the_run():
    from gazelle.runtime.restarts import FailedStarts

    starts = FailedStarts(2)
    starts.record(0, True, "actor 0", 1)
    starts.record(0, True, "actor 0", 1)
    starts.record(0, False, "actor 0", -9)  # it had started: a fault, not a start failure
    starts.record(0, True, "actor 0", 1)
    starts.record(1, True, "actor 1", 1)
    starts.record(0, True, "actor 0", 1)
    with pytest.raises(RunError, match=r"^actor 0 died before it started, 3 times in a row "
                       r"\(last exit code 1; .*if __name__ == '__main__'"):  # fmt: skip
        starts.record(0, True, "actor 0", 1)


@dataclasses.dataclass(frozen=True)
class Spec:
    actor_id: int
    seed: int


def crash_at_start(spec: Spec, child) -> None:
    """In a spawned child: fail before any sign of life (as a script without the main
    guard does when the child imports it)."""
    raise RuntimeError("cannot start")


@pytest.mark.slow
def test_a_local_process_that_cannot_start_stops_the_run_in_one_line():
    """It was replaced again and again (a script without the main guard: 48 restarts in
    two minutes, each printing the same traceback, and no end)."""
    from gazelle.backends.local.process import TaskFleet

    fleet = TaskFleet([Spec(0, 0)], crash_at_start, ())
    fleet.start()
    try:
        deadline = time.monotonic() + 60  # why: it stops within ~10 s
        with pytest.raises(RunError, match=r"^worker 0 died before it started, 3 times"):
            while time.monotonic() < deadline:
                fleet.poll()
                time.sleep(0.05)
        assert fleet.restarts[0] == 3
    finally:
        fleet.close()
