"""Run one (game, seed) pair of a suite: an ordinary `gazelle train` in a process of its
own, to the suite's budget (frames, or minutes of training, then SIGINT as Ctrl-C), with its
state in its status file (`gazelle.suite.pairs`). The local path calls `run_pair` here,
one pair after another; a Ray task calls it on the node Ray chose (`gazelle.suite.on_ray`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gazelle.suite.pairs import (
    Pair,
    budget_met,
    command_line,
    read_status,
    train_args,
    trained_s,
    write_status,
)
from gazelle.suite.spec import SuiteSpec

#: How often a minutes-budget run's progress is read (seconds).
POLL_S = 1.0
#: How long a stopped run may take to save its checkpoint before it is killed (seconds).
SAVE_TIMEOUT_S = 300.0
#: The line `gazelle train` prints when `--target-return` ended the run early (done).
TARGET_STOP = "stopped at --target-return"

#: Runs a command (argv[2:]) as its parent and watches the process that started it (pid
#: argv[1]): once that one is gone (a suite or a Ray worker killed), the command gets one
#: SIGINT, as Ctrl-C (a run saves, then exits). It ignores the SIGINT a stop sends to the
#: whole process group (the run gets that one itself) and exits with the command's code.
ORPHAN_GUARD = """\
import os, signal, subprocess, sys
signal.signal(signal.SIGINT, lambda *_: None)  # a handler, not SIG_IGN: exec resets it
starter, told = int(sys.argv[1]), False
run = subprocess.Popen(sys.argv[2:])
while run.poll() is None:
    if not told and os.getppid() != starter:
        run.send_signal(signal.SIGINT)
        told = True
    try:
        run.wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        pass
sys.exit(run.returncode if run.returncode >= 0 else 128 - run.returncode)
"""


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")


def _tail(path: Path, size: int = 4096) -> str:
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - size))
        return file.read().decode(errors="replace")


@contextmanager
def signals_as_interrupt(active: bool = True) -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt inside, so a `kill` of the suite stops its
    runs as Ctrl-C does (each saves its checkpoint) instead of orphaning them; SIGINT too,
    because a suite started in the background by a script (`cmd &`) inherits SIGINT as
    ignored. `active` False: a no-op (a Ray task: the signals are its worker's, and Ray
    cancels a task with KeyboardInterrupt itself)."""
    if not active:
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a run as Ctrl-C would (SIGINT to its process group: it saves and exits); kill it
    if it has not exited within `SAVE_TIMEOUT_S`."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=SAVE_TIMEOUT_S)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()  # bounded: SIGKILL of its process group ends it at once


def run_pair(
    spec: SuiteSpec,
    pair: Pair,
    *,
    where: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    signals: bool = True,
    should_stop: Callable[[], bool] | None = None,
) -> str:
    """Run (or resume) one pair to its budget; returns its new status. KeyboardInterrupt
    (Ctrl-C or SIGTERM of the suite, or Ray cancelling the task) stops the run, marks it
    `interrupted` and propagates. `where` (what ran it) goes into the status file beside
    this host's name; `env`: the run's environment (default: this process's); `signals`
    False: this process's signal handlers are left alone (a Ray task); `should_stop`, asked
    at each poll, True: stop as on KeyboardInterrupt (a Ray task whose suite stopped)."""
    pair.logdir.parent.mkdir(parents=True, exist_ok=True)
    command = command_line(spec, pair)
    attempts = int(read_status(pair).get("attempts", 0)) + 1
    write_status(
        pair,
        game=pair.game,
        seed=pair.seed,
        status="running",
        command=command,
        logdir=str(pair.logdir),
        attempts=attempts,
        returncode=None,
        error=None,
        where={"host": socket.gethostname(), **(where or {})},
        started_at=time.time(),
        ended_at=None,
    )
    run = [sys.executable, "-m", "gazelle.cli", "train", *train_args(spec, pair)]
    # why: the guard gives the run one SIGINT (it saves, then exits) when this process dies
    # (a suite or a Ray worker killed): never a run left training with nobody to report it.
    # A guard process rather than the kernel's parent-death signal: with that one, a run
    # orphaned on a Ray node got a second SIGINT while it saved, which aborted the save.
    full = [sys.executable, "-c", ORPHAN_GUARD, str(os.getpid()), *run]
    deadline = None if spec.minutes is None else spec.minutes * 60.0
    stopped_at_budget = False
    with open(pair.log_path, "ab") as log:
        log.write(f"\n$ {command}\n".encode())
        log.flush()
        # why: a session of its own, so a terminal's Ctrl-C reaches the suite only, which
        # then stops the run through `_stop` (the run saves; the status says interrupted).
        process = subprocess.Popen(
            full,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
        write_status(pair, where={**read_status(pair)["where"], "run_pid": process.pid})
        try:
            with signals_as_interrupt(signals):
                while process.poll() is None:
                    time.sleep(POLL_S if deadline is not None else 0.2)
                    if should_stop is not None and should_stop():
                        raise KeyboardInterrupt("the suite stopped")
                    if deadline is not None and trained_s(pair.logdir) >= deadline:
                        stopped_at_budget = True
                        _stop(process)
        except KeyboardInterrupt:
            _stop(process)
            write_status(
                pair, status="interrupted", returncode=process.returncode, ended_at=time.time()
            )
            raise
    code = process.returncode
    if code != 0:
        status, error = "failed", _last_line(pair.log_path) or f"exit code {code}"
    elif stopped_at_budget or budget_met(spec, pair) or TARGET_STOP in _tail(pair.log_path):
        status, error = "done", None
    else:
        status, error = "interrupted", "the run ended before its budget (stopped from outside?)"
    write_status(pair, status=status, returncode=code, error=error, ended_at=time.time())
    return status
