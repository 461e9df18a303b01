"""A local fleet ends what its children started along with them: a child leads its own
process group, and the fleet kills the group when the child crashed, was killed as hung, or
at close. (A ViZDoom env's engine is a process of its own that outlived its SIGKILLed
parent; each actor killed as hung left its 8 engines running.)"""

from __future__ import annotations

import atexit
import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest

from gazelle.backends.local.process import TaskFleet
from procfs import running

pytestmark = pytest.mark.slow


@dataclasses.dataclass(frozen=True)
class Spec:
    actor_id: int
    seed: int
    mode: str  # "crash": dies once after starting its grandchild; "hang": stops beating
    marker: str


def start_a_grandchild(spec: Spec, child) -> None:
    """In a spawned child: start a long `sleep` (standing in for an env's engine), report
    its pid, then crash (the first time), stop beating (the first time), or wait."""
    grandchild = subprocess.Popen(["sleep", "600"])
    child.report({"type": "grandchild", "actor": spec.actor_id, "pid": grandchild.pid})
    first = not Path(spec.marker).exists()
    Path(spec.marker).touch()
    if first and spec.mode == "crash":
        os._exit(3)
    if first and spec.mode == "hang":
        child.beat()
        time.sleep(600)  # silent: the fleet kills it as hung
    while not child.waiting():
        time.sleep(0.05)


def test_a_crashed_a_hung_and_a_closed_child_take_what_they_started_with_them(tmp_path):
    specs = [
        Spec(0, 0, "crash", str(tmp_path / "crashed")),
        Spec(1, 1, "hang", str(tmp_path / "hung")),
    ]
    fleet = TaskFleet(specs, start_a_grandchild, (), actor_timeout_s=3.0)
    fleet.start()
    pids: dict[int, list[int]] = {0: [], 1: []}
    restarts: list[dict] = []
    try:
        deadline = time.monotonic() + 120
        # Each child's first grandchild, then its replacement's (after the crash / the kill).
        while time.monotonic() < deadline and min(len(p) for p in pids.values()) < 2:
            for event in fleet.poll():
                if event["type"] == "grandchild":
                    pids[event["actor"]].append(event["pid"])
                elif event["type"] in ("actor_restart", "actor_hung"):
                    restarts.append(event)
            time.sleep(0.05)
        assert min(len(p) for p in pids.values()) == 2, (pids, restarts)
        assert {e["type"] for e in restarts} >= {"actor_restart", "actor_hung"}, restarts
        # The crashed child's and the hung child's grandchildren went with them ...
        time.sleep(0.5)
        assert not running(pids[0][0]) and not running(pids[1][0]), pids
        # ... and their replacements' still run while the fleet does.
        assert running(pids[0][1]) and running(pids[1][1]), pids
    finally:
        fleet.close()
    time.sleep(0.5)
    assert not any(running(pid) for pid in pids[0] + pids[1]), pids


def return_after_registering_an_exit_handler(spec: Spec, child) -> None:
    """In a spawned child: register an exit handler that writes `spec.marker` (an env's
    clean-up at exit), then return (the work done); with mode "raise", raise instead."""
    atexit.register(Path(spec.marker).write_text, "ran")
    if spec.mode == "raise":
        raise RuntimeError("the work failed")


@pytest.mark.parametrize(("mode", "code"), [("return", 0), ("raise", 1)])
def test_a_child_whose_work_ended_runs_its_exit_handlers_and_exits_with_its_code(
    tmp_path, mode, code
):
    """A child skips the interpreter's teardown once its work returned
    (`gazelle.backends.local.child.end_now`), but not what must happen at its exit: the
    exit handlers registered in it run, and the exit code says how the work ended."""
    marker = tmp_path / "exit-handler"
    fleet = TaskFleet([Spec(0, 0, mode, str(marker))], return_after_registering_an_exit_handler, ())
    fleet.start()
    try:
        process = fleet.processes[0]
        assert process is not None
        process.join(120)
        assert process.exitcode == code
    finally:
        fleet.close()
    assert marker.read_text() == "ran"
