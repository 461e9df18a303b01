"""Run a suite's (game, seed) pairs one after another, each an ordinary `gazelle train` in a
process of its own, and keep each pair's state in a small status file beside its logdir.

Under the suite's directory, per game folder: `seed-S/` (the run's logdir), `seed-S.json`
(status: `running`, `done`, `failed` or `interrupted`, with the command and exit code) and
`seed-S.log` (the run's console). A rerun skips `done` pairs, resumes `running` and
`interrupted` ones (gazelle's own resume from the checkpoint in the logdir), and leaves
`failed` ones failed unless asked (`retry_failed`), so a report never turns a crash into a
success unseen.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gazelle.suite.spec import SuiteSpec, folder_name

#: How often a minutes-budget run's progress is read (seconds).
POLL_S = 1.0
#: How long a stopped run may take to save its checkpoint before it is killed (seconds).
SAVE_TIMEOUT_S = 300.0
#: The line `gazelle train` prints when `--target-return` ended the run early (done).
TARGET_STOP = "stopped at --target-return"


@dataclass(frozen=True)
class Pair:
    """One (game, seed) of a suite and where its files are."""

    game: str
    seed: int
    logdir: Path
    status_path: Path
    log_path: Path


def pairs(spec: SuiteSpec) -> list[Pair]:
    """Every (game, seed) of the suite, game by game."""
    found = []
    for game in spec.games:
        folder = spec.out / folder_name(game)
        for seed in spec.seeds:
            name = f"seed-{seed}"
            found.append(
                Pair(game, seed, folder / name, folder / f"{name}.json", folder / f"{name}.log")
            )
    return found


def train_args(spec: SuiteSpec, pair: Pair) -> list[str]:
    """The `gazelle train` arguments of one pair: the suite's own, then the user's flags."""
    args = ["--env", pair.game, "--seed", str(pair.seed), "--logdir", str(pair.logdir)]
    if spec.frames is not None:
        args += ["--total-frames", str(spec.frames)]
    return [*args, *spec.train_args]


def command_line(spec: SuiteSpec, pair: Pair) -> str:
    """The pair's run as a user would type it (the report's `command`)."""
    line = shlex.join(["gazelle", "train", *train_args(spec, pair)])
    if spec.minutes is not None:
        line += f"  # stopped (SIGINT) after {spec.minutes:g} minutes of training"
    return line


def read_rows(logdir: Path) -> list[dict[str, Any]]:
    """The rows of a run's progress.jsonl (none when absent); a torn line is skipped."""
    from gazelle.plot.runs import read_rows as read_progress_file

    path = logdir / "progress.jsonl"
    return read_progress_file(path) if path.is_file() else []


def read_status(pair: Pair) -> dict[str, Any]:
    """The pair's status file; `{"status": "not started"}` when there is none."""
    try:
        return dict(json.loads(pair.status_path.read_text()))
    except (OSError, ValueError):
        return {"status": "not started"}


def _write_status(pair: Pair, **fields: Any) -> None:
    status = {**read_status(pair), **fields}
    tmp = pair.status_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(status, indent=1) + "\n")
    os.replace(tmp, pair.status_path)  # why: a suite killed mid-write leaves the old file


def _trained_s(logdir: Path) -> float:
    rows = read_rows(logdir)
    return float(rows[-1].get("time") or 0.0) if rows else 0.0


def _budget_met(spec: SuiteSpec, pair: Pair) -> bool:
    rows = read_rows(pair.logdir)
    if not rows:
        return False
    if spec.minutes is not None:
        return float(rows[-1].get("time") or 0.0) >= spec.minutes * 60.0
    return int(rows[-1].get("frames") or 0) >= (spec.frames or 0)


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside, so a `kill` of the suite stops its run as
    Ctrl-C does (the run saves its checkpoint) instead of orphaning it."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


def run_pair(spec: SuiteSpec, pair: Pair) -> str:
    """Run (or resume) one pair to its budget; returns its new status. KeyboardInterrupt
    (Ctrl-C or SIGTERM of the suite) stops the run, marks it `interrupted` and propagates."""
    pair.logdir.parent.mkdir(parents=True, exist_ok=True)
    command = command_line(spec, pair)
    attempts = int(read_status(pair).get("attempts", 0)) + 1
    _write_status(
        pair,
        game=pair.game,
        seed=pair.seed,
        status="running",
        command=command,
        logdir=str(pair.logdir),
        attempts=attempts,
        returncode=None,
        error=None,
    )
    full = [sys.executable, "-m", "gazelle.cli", "train", *train_args(spec, pair)]
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
        )
        try:
            with _sigterm_as_interrupt():
                while process.poll() is None:
                    time.sleep(POLL_S if deadline is not None else 0.2)
                    if deadline is not None and _trained_s(pair.logdir) >= deadline:
                        stopped_at_budget = True
                        _stop(process)
        except KeyboardInterrupt:
            _stop(process)
            _write_status(pair, status="interrupted", returncode=process.returncode)
            raise
    code = process.returncode
    if code != 0:
        status, error = "failed", _last_line(pair.log_path) or f"exit code {code}"
    elif stopped_at_budget or _budget_met(spec, pair) or TARGET_STOP in _tail(pair.log_path):
        status, error = "done", None
    else:
        status, error = "interrupted", "the run ended before its budget (stopped from outside?)"
    _write_status(pair, status=status, returncode=code, error=error)
    return status


def _tail(path: Path, size: int = 4096) -> str:
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - size))
        return file.read().decode(errors="replace")


def should_run(spec: SuiteSpec, pair: Pair) -> bool:
    """Whether a pair still needs a run: not `done`, and not `failed` unless retried."""
    status = read_status(pair)["status"]
    return status != "done" and (status != "failed" or spec.retry_failed)


def run_suite(spec: SuiteSpec) -> dict[str, int]:
    """Run every pair that still needs it, one after another; returns the count of pairs
    per status after this pass (`skipped`: finished or failed before, not run now)."""
    spec.out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    todo = pairs(spec)
    for number, pair in enumerate(todo, 1):
        where = f"[{number}/{len(todo)}] {pair.game} seed {pair.seed}"
        if not should_run(spec, pair):
            before = read_status(pair)["status"]
            print(f"gazelle suite: {where}: {before} before, not run again")
            counts["skipped"] = counts.get("skipped", 0) + 1
            continue
        if read_status(pair)["status"] != "not started" and _budget_met(spec, pair):
            # why: stopped after its last row reached the budget, before its status said so
            _write_status(pair, status="done", error=None)
            print(f"gazelle suite: {where}: done before (budget reached), not run again")
            counts["done"] = counts.get("done", 0) + 1
            continue
        print(f"gazelle suite: {where}: running (console: {pair.log_path})", flush=True)
        started = time.monotonic()
        status = run_pair(spec, pair)
        took = time.monotonic() - started
        extra = f": {read_status(pair).get('error')}" if status == "failed" else ""
        print(f"gazelle suite: {where}: {status} in {took:.0f} s{extra}", flush=True)
        counts[status] = counts.get(status, 0) + 1
    return counts
