"""Keep benchmark runs' curves in the repository, so reports can be redrawn and grids
finished in a later session (a new machine starts without the old runs' directories).

    python benchmarks/keep_runs.py /work/runs/tts/a3c-pong benchmarks/results/a3c-pong
    python benchmarks/keep_runs.py /work/runs/tts/a3c-pong \\
        benchmarks/results/a3c-diff/pong/gazelle --minutes 30

Each `seed-*` directory under SRC (at any depth) is copied to the same path under DEST with
only what `time_to_score.py` and `a3c_differences.py` read: its `launch.json` and its
`progress.jsonl` rows cut to the keys in `KEPT` (about 110 bytes a row; a one-hour run is
~80 KB). `--minutes M` keeps only the rows logged within M minutes of the launch: the first
M minutes of a longer run are a run of M minutes where nothing in the run depends on its
length (a constant learning rate; check the command), so a 60-minute run can stand for a
grid's 30-minute arm. Copied into a grid's OUT, a kept seed is not run again
(`a3c_differences.py` skips a seed whose directory exists) and `--report` draws it.

Machines differ in speed by up to 2x, and not by the same factor for every workload (A3C
ran at 2,460 frames/s on one and 1,540 on another where IMPALA ran at the same speed), so
minutes are comparable only within one sitting: a kept run from another machine is
compared by frames, or next to a baseline run again in the same sitting.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_to_score as tts

#: The progress-row keys kept (and every per-level `episode_return/<level>`).
KEPT = ("frames", "wall_time", "time", "fps", "episode_return", "episode_window")


def compact(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k in KEPT or k.startswith("episode_return/")}


def keep(source: Path, dest: Path, minutes: float | None) -> int:
    """Copy one run directory's launch and compacted rows; returns the rows kept."""
    launch = tts.read_launch(source)
    rows = tts.rows_of(source)
    if minutes is not None:
        rows = [r for r in rows if (r["wall_time"] - launch["launched"]) / 60.0 <= minutes]
        launch["kept_minutes"] = minutes
    dest.mkdir(parents=True, exist_ok=True)
    (dest / tts.LAUNCH_FILE).write_text(json.dumps(launch) + "\n")
    with open(dest / "progress.jsonl", "w") as out:
        out.writelines(json.dumps(compact(row)) + "\n" for row in rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a benchmark's OUT (holds seed-* dirs)")
    parser.add_argument("dest", type=Path, help="where the kept copies go")
    parser.add_argument("--minutes", type=float, default=None,
                        help="keep only the rows within this many minutes of launch")  # fmt: skip
    args = parser.parse_args(argv)
    runs = sorted(p for p in args.source.rglob("seed-*") if (p / tts.LAUNCH_FILE).exists())
    if not runs:
        parser.error(f"no seed-*/{tts.LAUNCH_FILE} under {args.source}")
    for run in runs:
        kept = keep(run, args.dest / run.relative_to(args.source), args.minutes)
        print(f"{run} -> {args.dest / run.relative_to(args.source)}: {kept} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
