"""One member of the population: a Ray Tune trial that trains one gazelle run in segments
of `--interval` frames, with gazelle's own loop, checkpoints and resume.

    the trial starts ─► place its run: fresh; its own checkpoint (Tune paused it); or a
    │                   better member's (PBT's exploit: a new run folder, that checkpoint in it)
    └─► loop: gazelle.train(its config, to the next multiple of --interval)
              ─► the loop's final checkpoint (optimiser, schedule, RNGs, return window)
              ─► tune.report(frames, objective, values; Tune checkpoint = that file)
              ─► Tune continues it, or stops it (an exploit restarts it, as above)

A segment ends as Ctrl-C ends a run: the member's `on_progress` raises `Pause` (a
`KeyboardInterrupt`) at the first progress row past the interval's end, and the loop saves
its checkpoint and returns. The next segment resumes from it, with the same budget, so the
learning-rate decay goes on exactly; after an exploit the run resumes from the other
member's checkpoint with the explored values (a new `--learning-rate` decays from there).
Nothing of gazelle runs while the member waits for Tune, so a trial stopped then leaves
nothing behind. Everything a member prints goes to `members/<name>/console.log`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gazelle.algorithms.runstate import CHECKPOINT_FILE
from gazelle.tune.explore import member_config, member_index, values_of
from gazelle.tune.spec import TuneSpec

#: In a Tune checkpoint, beside gazelle's checkpoint file: who wrote it, at which frame.
ORIGIN_FILE = "member.json"
#: A member's hyperparameter schedule: one JSON row per event (start, report, exploit, ...).
JOURNAL_FILE = "schedule.jsonl"
#: The metric PBT ranks members by, and its clock.
METRIC, TIME_ATTR = "objective", "frames"
SCORE = "scores/human_normalized_cap_100"


class Pause(KeyboardInterrupt):
    """Raised from `on_progress` at the end of a segment: the loop stops as on Ctrl-C."""


def journal(home: Path, event: str, **fields: Any) -> dict[str, Any]:
    """Append one event to the member's `schedule.jsonl`; returns it."""
    row = {"event": event, "wall_time": round(time.time(), 3), **fields}
    with (home / JOURNAL_FILE).open("a") as file:
        file.write(json.dumps(row) + "\n")
    return row


def read_journal(home: Path) -> list[dict[str, Any]]:
    path = home / JOURNAL_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def objective(row: Mapping[str, Any], name: str) -> float | None:
    """What ranks a member by its last progress row: `name`, or for "auto" the mean capped
    human-normalised score of a multi-task run where it is logged, else the recent mean
    return. None before any episode ended."""
    if name == "auto":
        levels = [key for key in row if key.startswith("episode_return/")]
        name = SCORE if len(levels) > 1 and row.get(SCORE) is not None else "episode_return"
    value = row.get(name)
    return None if value is None else float(value)


def last_row(logdir: Path) -> dict[str, Any]:
    """The last complete row of a run's `progress.jsonl` (the loop's final one)."""
    for line in reversed((logdir / "progress.jsonl").read_text().splitlines()):
        with contextlib.suppress(ValueError):
            return dict(json.loads(line))
    raise ValueError(f"no progress row in {logdir}")


def run_folders(home: Path) -> list[Path]:
    """The member's run folders, `run-0`, `run-1`, ... (one per exploit), in order."""
    found = [p for p in home.glob("run-*") if p.is_dir() and p.name[4:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[4:]))


def _install(source: Path, logdir: Path) -> None:
    """`source` as `logdir`'s checkpoint, atomically."""
    logdir.mkdir(parents=True, exist_ok=True)
    target = logdir / CHECKPOINT_FILE
    if target.is_file() and sha256(target) == sha256(source):
        return
    tmp = logdir / f".{CHECKPOINT_FILE}.tune"
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def place(home: Path, name: str, values: Mapping[str, Any], checkpoint: Any) -> tuple[Path, int]:
    """The run folder this start of the trial trains in, and its frame count: a new one
    (fresh start, or an exploit: the other member's checkpoint copied into it), or the last
    one with Tune's checkpoint of it (Tune paused the trial and starts it again)."""
    runs = run_folders(home)
    fresh = home / f"run-{len(runs)}"
    if checkpoint is None:
        journal(home, "start", frames=0, values=dict(values), run=fresh.name)
        return fresh, 0
    with checkpoint.as_directory() as folder:
        origin = json.loads((Path(folder) / ORIGIN_FILE).read_text())
        source = Path(folder) / CHECKPOINT_FILE
        frames = int(origin["frames"])
        if origin["member"] == name and runs:
            _install(source, runs[-1])
            journal(home, "resume", frames=frames, values=dict(values), run=runs[-1].name)
            return runs[-1], frames
        _install(source, fresh)
        before = [row for row in read_journal(home) if row["event"] == "report"]
        journal(
            home,
            "exploit",
            frames=frames,
            copied=origin["member"],
            copied_sha256=origin["sha256"],
            own_frames=before[-1]["frames"] if before else 0,
            own_values=before[-1]["values"] if before else None,
            values=dict(values),
            run=fresh.name,
        )
        return fresh, frames


@contextlib.contextmanager
def console_to(path: Path) -> Iterator[None]:
    """This process's stdout and stderr (its actor processes' too) into `path`: the trial's
    Ray worker runs this member only."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("ab") as file:
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _pause_at(stop_at: int, paused: list[bool]) -> Callable[[dict[str, Any]], None]:
    def on_progress(row: dict[str, Any]) -> None:
        if int(row["frames"]) >= stop_at:
            paused.append(True)
            raise Pause

    return on_progress


def _report_folder(home: Path, logdir: Path, origin: dict[str, Any]) -> Path:
    """A fresh folder with the run's checkpoint and `member.json`: the Tune checkpoint."""
    folder = home / ".report"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        os.link(logdir / CHECKPOINT_FILE, folder / CHECKPOINT_FILE)  # why: gazelle replaces,
    except OSError:  # never rewrites, its checkpoint file: the link keeps this version
        shutil.copyfile(logdir / CHECKPOINT_FILE, folder / CHECKPOINT_FILE)
    (folder / ORIGIN_FILE).write_text(json.dumps(origin))
    return folder


def train_member(config: dict[str, Any], spec: TuneSpec) -> None:
    """The Ray Tune trainable of one member (`tune.with_parameters(train_member, spec=...)`)."""
    from ray import tune

    from gazelle.api import train

    name = tune.get_context().get_trial_name()
    index = member_index(name)
    home = spec.out / "members" / name
    home.mkdir(parents=True, exist_ok=True)
    values = values_of(config, spec.mutations)
    with console_to(home / "console.log"):
        try:
            logdir, frames = place(home, name, values, tune.get_checkpoint())
            while True:
                # why: stops at multiples of the interval, where PBT looks at the member
                stop_at = min(spec.frames, (frames // spec.interval + 1) * spec.interval)
                paused: list[bool] = []
                print(f"gazelle tune: {name}: {values} to {stop_at:,} frames in {logdir}")
                cfg = member_config(spec, index, values, logdir)
                result = train(cfg, on_progress=_pause_at(stop_at, paused))
                frames = result.frames
                last = last_row(logdir)
                score = objective(last, spec.objective)
                digest = sha256(logdir / CHECKPOINT_FILE)
                origin = {"member": name, "frames": frames, "values": values, "sha256": digest}
                journal(
                    home, "report", frames=frames, objective=score, values=values,
                    episode_return=last.get("episode_return"), run=logdir.name, sha256=digest,
                )  # fmt: skip
                metrics = {
                    TIME_ATTR: frames,
                    METRIC: math.nan if score is None else score,
                    "episode_return": last.get("episode_return") or math.nan,
                    **{f"values/{k}": v for k, v in values.items()},
                }
                done = not paused or frames >= spec.frames
                folder = _report_folder(home, logdir, origin)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(folder)))
                if done:
                    return
        except Exception as err:
            from gazelle.algorithms.stops import one_line

            journal(home, "failed", error=one_line(err))
            raise
