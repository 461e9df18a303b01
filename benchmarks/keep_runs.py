"""Keep benchmark runs' curves in the repository, so reports can be redrawn, grids finished in
a later session (a new machine starts without the old runs' directories) and the results
page's figures re-derived (`results_table.py --check`).

    python benchmarks/keep_runs.py /work/runs/tts/a3c-pong benchmarks/results/a3c-pong
    python benchmarks/keep_runs.py /work/runs/tts/a3c-pong \\
        benchmarks/results/a3c-diff/pong/gazelle --minutes 30
    python benchmarks/keep_runs.py --in-place benchmarks/results/NAME   # compact a kept copy

Each `seed-*` directory under SRC (at any depth) is copied to the same path under DEST with
only what the reports read: its `launch.json` and its progress rows cut to the keys in `KEPT`
(the returns, frames, times and frames/s, and the few diagnostics the notes quote: the
policy's entropy, the policy lag, the behaviour/target KL and the dead-unit shares), floats
rounded to `DIGITS` significant digits, gzipped as `progress.jsonl.gz` (~20 bytes a row; a
one-hour run is ~15 KB). `time_to_score.py`, `a3c_differences.py` and `gazelle plot` read it.
The kept data's size budget is benchmarks/results/README.md's (`results_table.py --check`
fails above it). `--minutes M` keeps only the rows logged within M minutes of the launch:
the first M minutes of a longer run are a run of M minutes where nothing in the run depends
on its length (a constant learning rate; check the command), so a 60-minute run can stand for
a grid's 30-minute arm. Copied into a grid's OUT, a kept seed is not run again
(`a3c_differences.py` skips a seed whose directory exists) and `--report` draws it.
`--in-place DIR` rewrites every seed of DIR so (a plain `progress.jsonl` becomes the gzipped,
trimmed one).

Machines differ in speed by up to 2x, and not by the same factor for every workload (A3C
ran at 2,460 frames/s on one and 1,540 on another where IMPALA ran at the same speed), so
minutes are comparable only within one sitting: a kept run from another machine is
compared by frames, or next to a baseline run again in the same sitting.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_to_score as tts

#: The progress-row keys kept (and every per-level `episode_return/<level>` and
#: `layers/dead_units/<group>`).
KEPT = (
    "frames", "wall_time", "time", "fps", "episode_return", "episode_window",
    "policy/entropy", "charts/policy_lag", "vtrace/kl_behaviour_target",
    # why: what docs/notes/continuous.md quotes of a control run
    "policy/log_std_mean", "ppo/approx_kl", "ppo/clip_fraction",
)  # fmt: skip
KEPT_PREFIXES = ("episode_return/", "layers/dead_units/")
#: Significant digits kept of a float (wall_time keeps its 0.01 s: it is ~1.8e9).
DIGITS = 5
KEPT_FILE = "progress.jsonl.gz"


def _round(key: str, value: Any) -> Any:
    if not isinstance(value, float) or not math.isfinite(value) or value == 0.0:
        return value
    if key in ("wall_time", "time"):
        return round(value, 2)
    return round(value, DIGITS - 1 - math.floor(math.log10(abs(value))))


def compact(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _round(k, v) for k, v in row.items() if k in KEPT or k.startswith(KEPT_PREFIXES)}


def write_rows(dest: Path, rows: list[dict[str, Any]]) -> None:
    """`dest/progress.jsonl.gz`: the compacted rows (and no plain progress.jsonl beside it)."""
    text = "".join(json.dumps(compact(row)) + "\n" for row in rows)
    # why: mtime=0 so that the same rows give the same bytes (a re-kept run is no git change)
    (dest / KEPT_FILE).write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    (dest / "progress.jsonl").unlink(missing_ok=True)


def keep(source: Path, dest: Path, minutes: float | None) -> int:
    """Copy one run directory's launch and compacted rows; returns the rows kept."""
    launch = tts.read_launch(source)
    rows = tts.rows_of(source)
    if minutes is not None:
        rows = [r for r in rows if (r["wall_time"] - launch["launched"]) / 60.0 <= minutes]
        launch["kept_minutes"] = minutes
    dest.mkdir(parents=True, exist_ok=True)
    (dest / tts.LAUNCH_FILE).write_text(json.dumps(launch) + "\n")
    write_rows(dest, rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a benchmark's OUT (holds seed-* dirs)")
    parser.add_argument("dest", type=Path, nargs="?", help="where the kept copies go")
    parser.add_argument("--minutes", type=float, default=None,
                        help="keep only the rows within this many minutes of launch")  # fmt: skip
    parser.add_argument("--in-place", action="store_true",
                        help="compact the kept runs under SOURCE in place (no DEST)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.in_place == (args.dest is not None):
        parser.error("give DEST, or --in-place without DEST")
    runs = sorted(p for p in args.source.rglob("seed-*") if (p / tts.LAUNCH_FILE).exists())
    if not runs:
        parser.error(f"no seed-*/{tts.LAUNCH_FILE} under {args.source}")
    for run in runs:
        if args.in_place:
            rows = tts.rows_of(run)
            write_rows(run, rows)
            print(f"{run}: {len(rows)} rows, {(run / KEPT_FILE).stat().st_size:,} bytes")
            continue
        kept = keep(run, args.dest / run.relative_to(args.source), args.minutes)
        print(f"{run} -> {args.dest / run.relative_to(args.source)}: {kept} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
