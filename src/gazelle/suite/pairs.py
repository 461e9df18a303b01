"""A suite's (game, seed) pairs and their files, which both ways of running them share.

Under the suite's directory, per game folder: `seed-S/` (the run's logdir), `seed-S.json`
(status: `running`, `done`, `failed` or `interrupted`, with the command, the exit code,
where and when it ran) and `seed-S.log` (the run's console). The report reads only these
files, so a suite's report is the same whether its runs ran here or as Ray tasks.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gazelle.suite.spec import SuiteSpec, folder_name


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


def write_status(pair: Pair, **fields: Any) -> None:
    """Update the pair's status file with `fields`, atomically."""
    status = {**read_status(pair), **fields}
    tmp = pair.status_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(status, indent=1) + "\n")
    os.replace(tmp, pair.status_path)  # why: a suite killed mid-write leaves the old file


def trained_s(logdir: Path) -> float:
    """Seconds of training the run's last progress row says (0 before its first)."""
    rows = read_rows(logdir)
    return float(rows[-1].get("time") or 0.0) if rows else 0.0


def budget_met(spec: SuiteSpec, pair: Pair) -> bool:
    """Whether the run's last progress row reached the suite's budget (frames or minutes)."""
    rows = read_rows(pair.logdir)
    if not rows:
        return False
    if spec.minutes is not None:
        return float(rows[-1].get("time") or 0.0) >= spec.minutes * 60.0
    return int(rows[-1].get("frames") or 0) >= (spec.frames or 0)


def should_run(spec: SuiteSpec, pair: Pair) -> bool:
    """Whether a pair still needs a run: not `done`, and not `failed` unless retried."""
    status = read_status(pair)["status"]
    return status != "done" and (status != "failed" or spec.retry_failed)
