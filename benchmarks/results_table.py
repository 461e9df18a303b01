"""The results page's tables, made from the kept runs: every figure re-derived, or checked.

    python benchmarks/results_table.py            # rewrite docs/results.md's tables
    python benchmarks/results_table.py --check    # fail if a figure there (or a quote of it
                                                  # in README.md) differs from the kept data

`benchmarks/results/table.toml` lists each row of docs/results.md's tables: the env, the
algorithm, the kept runs (`benchmarks/results/...`, one per seed), the threshold, the budget
(minutes from launch, or env frames) and which figure the row gives:

- `figure = "time"`: minutes and env frames from launch until a seed's 100-episode mean
  first reached the threshold (`time_to_score.first_at`, the window full), within the
  budget; the median over seeds counts a seed that did not reach it as not reached
  (`time_to_score.median_counting_misses`), never drops it.
- `figure = "return"`: the 100-episode mean at the budget (the last progress row within
  it); the median and the spread over seeds.

Each row also gets the seeds that reached the threshold within the budget out of those run;
the spread (min-max, and each seed that missed, with where it ended); the training frames/s
(the run's own average, `fps` of its last row within the budget: the median over seeds) and
the machine (the median of the speed checks `time_to_score.py` ran around each seed); the
exact command (each seed's `launch.json`, less the `--seed` and `--logdir` the benchmark
added; all seeds of a row must share it); and where the data is kept. A run that missed
must have run its whole budget, or the row is refused (a stopped run is not a miss).

A row whose runs are not kept (`kept = false`) gives its figures from the file
(`reported`), marked "not re-derivable" on the page. A row's `quote` (with `{median}`,
`{frames}`, `{reached}`, `{runs}`, `{spread}`) must appear word for word (line breaks
aside) in the files of its `quote_in` (README.md by default), so a number there comes from
the table. The whole of benchmarks/results must stay within `size_budget_bytes`
(benchmarks/results/README.md).
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_to_score as tts

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as the dev extra installs it
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPEC = RESULTS / "table.toml"
PAGE = ROOT / "docs" / "results.md"
#: A seed that missed must have run this share of the budget (its last row), or it is
#: not a miss but a stopped run.
RAN_THE_BUDGET = 0.98
COLUMNS = (
    "#", "env", "algorithm", "budget", "threshold", "median over seeds", "reached / run",
    "spread (min-max)", "frames/s; machine", "command", "kept data",
)  # fmt: skip
BLOCK = re.compile(r"(<!-- results:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /results -->)",
                   re.DOTALL)  # fmt: skip


class TableError(Exception):
    """A row that the kept data cannot back (missing runs, a short run, commands that differ)."""


@dataclass(frozen=True)
class Budget:
    minutes: float | None = None
    frames: float | None = None

    @staticmethod
    def parse(text: str) -> Budget:
        """'25 min', '30M frames', '800K frames'."""
        match = re.fullmatch(r"([\d.]+)\s*(K|M)?\s*(min|frames)", text.strip())
        if not match:
            raise TableError(f"budget {text!r}: write '<N> min' or '<N>[K|M] frames'")
        value = float(match[1]) * {"K": 1e3, "M": 1e6, None: 1.0}[match[2]]
        return Budget(minutes=value) if match[3] == "min" else Budget(frames=value)

    def within(self, row: dict[str, Any], launched: float) -> bool:
        if self.minutes is not None:
            return (row["wall_time"] - launched) / 60.0 <= self.minutes
        assert self.frames is not None
        return row["frames"] <= self.frames

    def ran_whole(self, row: dict[str, Any], launched: float) -> bool:
        """Whether a run whose last row is `row` ran (nearly) the whole budget."""
        if self.minutes is not None:
            return (row["wall_time"] - launched) / 60.0 >= RAN_THE_BUDGET * self.minutes
        assert self.frames is not None
        return row["frames"] >= RAN_THE_BUDGET * self.frames


@dataclass(frozen=True)
class Seed:
    """One kept run of a row, cut at the budget."""

    path: str
    seed: int
    reached: dict[str, float] | None  # minutes and frames at the threshold, within budget
    end_return: float | None
    end_minutes: float
    end_frames: float
    fps: float | None
    speeds: list[float]
    command: str


def command_of(launch: dict[str, Any]) -> str:
    """The training command as a user types it: `gazelle ...`, without the `--seed S --logdir
    DIR` that time_to_score.py appended (a snapshot's path in argv[0] reads as gazelle)."""
    argv = list(launch["command"])
    for flag in ("--seed", "--logdir"):
        if flag in argv:
            at = argv.index(flag)
            del argv[at : at + 2]
    return " ".join(["gazelle", *argv[1:]])


def load_seed(results: Path, path: str, threshold: float | None, budget: Budget) -> Seed:
    logdir = results / path
    if not (logdir / tts.LAUNCH_FILE).exists():
        raise TableError(f"no kept run {logdir} (its {tts.LAUNCH_FILE} is missing)")
    launch = tts.read_launch(logdir)
    launched = launch["launched"]
    rows = tts.rows_of(logdir)
    if not rows:
        raise TableError(f"{logdir} holds no progress rows")
    within = [r for r in rows if budget.within(r, launched)]
    if not within:
        raise TableError(f"{logdir}: no progress row within the budget")
    reached = None
    if threshold is not None:
        reached = tts.first_at(within, threshold, tts.WINDOW, launched)
    last = within[-1]
    if reached is None and not budget.ran_whole(rows[-1], launched):
        raise TableError(
            f"{logdir} did not reach the threshold but ran only to "
            f"{(rows[-1]['wall_time'] - launched) / 60:.1f} min / {rows[-1]['frames']:,} "
            "frames, short of the budget: a stopped run is not a miss; cut the budget"
        )
    speeds = [s for s in (launch.get("speed_before"), launch.get("speed_after")) if s]
    return Seed(
        path=path, seed=int(logdir.name.split("-")[-1]), reached=reached,
        end_return=last.get("episode_return"), end_minutes=(last["wall_time"] - launched) / 60,
        end_frames=last["frames"], fps=last.get("fps"), speeds=speeds,
        command=command_of(launch),
    )  # fmt: skip


def runs_of(results: Path, row: dict[str, Any]) -> list[str]:
    """The row's kept run directories (globs expanded, sorted by seed)."""
    paths: list[str] = []
    for pattern in row["runs"]:
        found = sorted(str(p.relative_to(results)) for p in results.glob(pattern) if p.is_dir())
        if not found:
            raise TableError(f"row {row['id']}: no kept run matches {pattern!r}")
        paths += found
    return paths


def frames(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.0f}K"


def score(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 1 else f"{value:.1f}"


def number(value: float) -> str:
    """A threshold or budget as written: 18, 0.8, 22,736."""
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def derive(results: Path, row: dict[str, Any]) -> dict[str, str]:
    """The row's cells (and the quote's fields) from its kept runs."""
    budget = Budget.parse(row["budget"])
    threshold = row.get("threshold")
    seeds = [load_seed(results, p, threshold, budget) for p in runs_of(results, row)]
    commands = {s.command for s in seeds}
    if len(commands) != 1:
        raise TableError(f"row {row['id']}: its runs ran different commands: {commands}")
    reached = [s for s in seeds if s.reached]
    missed = [s for s in seeds if not s.reached]

    def miss(s: Seed) -> str:
        return (f"seed {s.seed} not reached: {score(s.end_return)} at {s.end_minutes:.1f} min, "
                f"{frames(s.end_frames)}")  # fmt: skip

    fields: dict[str, str] = {"runs": str(len(seeds)), "reached": str(len(reached))}
    if row["figure"] == "time":
        if threshold is None:
            raise TableError(f"row {row['id']}: a time figure needs a threshold")
        minutes = tts.median_counting_misses([s.reached["minutes"] for s in reached], len(seeds))  # type: ignore[index]
        frame = tts.median_counting_misses([s.reached["frames"] for s in reached], len(seeds))  # type: ignore[index]
        fields["median"] = "not reached" if math.isinf(minutes) else f"{minutes:.1f}"
        fields["frames"] = "not reached" if math.isinf(frame) else frames(frame)
        median = (
            "**not reached**" if math.isinf(minutes)
            else f"**{fields['median']} min**, {fields['frames']} frames"
        )  # fmt: skip
        parts = []
        if len(reached) > 1:
            lo = min(s.reached["minutes"] for s in reached)  # type: ignore[index]
            hi = max(s.reached["minutes"] for s in reached)  # type: ignore[index]
            flo = min(s.reached["frames"] for s in reached)  # type: ignore[index]
            fhi = max(s.reached["frames"] for s in reached)  # type: ignore[index]
            parts.append(f"{lo:.1f}-{hi:.1f} min, {frames(flo)}-{frames(fhi)}")
        elif reached:
            r = reached[0].reached
            assert r is not None
            parts.append(f"seed {reached[0].seed}: {r['minutes']:.1f} min, {frames(r['frames'])}")
        parts += [miss(s) for s in missed]
        spread = "; ".join(parts)
    elif row["figure"] == "return":
        values = [s.end_return for s in seeds]
        if any(v is None for v in values):
            raise TableError(f"row {row['id']}: a run has no return within the budget")
        middle = statistics.median(v for v in values if v is not None)
        fields["median"] = score(middle)
        median = f"**{fields['median']}**"
        shown = [v for v in values if v is not None]
        spread = (
            f"{score(min(shown))} to {score(max(shown))}" if len(seeds) > 1
            else f"seed {seeds[0].seed}"
        )  # fmt: skip
    else:
        raise TableError(f"row {row['id']}: figure must be 'time' or 'return'")
    fields["spread"] = spread
    fps = [s.fps for s in seeds if s.fps]
    speeds = [v for s in seeds for v in s.speeds]
    machine = f"speed check {statistics.median(speeds):,.0f} it/s" if speeds else "no speed check"
    if row.get("machine"):
        machine += f", {row['machine']}"
    dirs = sorted({str(Path(p).parent) for p in runs_of(results, row)})
    return {
        **fields,
        "median_cell": median,
        "reached_cell": (
            f"{len(reached)} of {len(seeds)}"
            if threshold is not None
            else f"no threshold; {len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'} run"
        ),
        "fps_cell": f"{statistics.median(fps):,.0f}; {machine}" if fps else machine,
        "command": next(iter(commands)),
        "data": ", ".join(f"`{d}`" for d in dirs),
    }


def cells(results: Path, row: dict[str, Any]) -> list[str]:
    """The row's cells on the page, in COLUMNS' order."""
    threshold = row.get("threshold")
    shown = "-" if threshold is None else number(threshold)
    if row.get("threshold_note"):
        shown += f" ({row['threshold_note']})"
    algorithm = row["algorithm"] + (f"; code {row['code']}" if row.get("code") else "")
    head = [row["id"], row["env"], algorithm, row["budget"], shown]
    if row.get("kept", True):
        d = derive(results, row)
        return [*head, d["median_cell"], d["reached_cell"], d["spread"], d["fps_cell"],
                f"`{d['command']}`", d["data"]]  # fmt: skip
    told = row["reported"]
    return [*head, told["median"], told["reached"], told["spread"], told["fps"],
            f"`{told['command']}`", "**not kept: not re-derivable**"]  # fmt: skip


def render(results: Path, spec: dict[str, Any], name: str) -> str:
    rows = [r for r in spec["row"] if r["table"] == name]
    if not rows:
        raise TableError(f"the page has a block {name!r} and table.toml no row for it")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        cell = [c.replace("|", "\\|") for c in cells(results, row)]
        lines.append("| " + " | ".join(cell) + " |")
    return "\n".join(lines) + "\n"


def make_page(page: str, results: Path, spec: dict[str, Any]) -> str:
    """The page with every results block made anew from the kept runs."""
    names = [m["name"] for m in BLOCK.finditer(page)]
    missing = sorted({r["table"] for r in spec["row"]} - set(names))
    if missing:
        raise TableError(f"table.toml has rows for {missing}, which the page has no block for")
    return BLOCK.sub(lambda m: m[1] + render(results, spec, m["name"]) + m[4], page)


def quotes(results: Path, spec: dict[str, Any], root: Path) -> list[str]:
    """The problems with the rows' quotes: each must appear word for word where it is named."""
    problems = []
    for row in spec["row"]:
        if "quote" not in row:
            continue
        fields = derive(results, row) if row.get("kept", True) else row["reported"]
        text = " ".join(row["quote"].format(**fields).split())
        for name in row.get("quote_in", ["README.md"]):
            # why: markdown wraps lines anywhere, so a quote may span a line break
            if text not in " ".join((root / name).read_text().split()):
                problems.append(f"{name} does not say {text!r} (row {row['id']}, from its data)")
    return problems


def size_problems(results: Path, spec: dict[str, Any]) -> list[str]:
    # why: a probe module imported from there leaves a __pycache__, which git ignores
    files = [p for p in results.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    total = sum(p.stat().st_size for p in files)
    budget = spec["size_budget_bytes"]
    if total <= budget:
        return []
    plain = sorted(str(p.relative_to(results)) for p in results.rglob("progress.jsonl"))
    return [
        f"benchmarks/results holds {total:,} bytes, over its budget of {budget:,} "
        f"(benchmarks/results/README.md); uncompacted: {plain[:5] or 'none'}: "
        "`python benchmarks/keep_runs.py --in-place benchmarks/results/<dir>` trims and "
        "gzips a kept run"
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 on any figure that differs")  # fmt: skip
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="where the quotes' files (README.md, docs/...) are")  # fmt: skip
    args = parser.parse_args(argv)
    spec = tomllib.loads(args.spec.read_text())
    page = args.page.read_text()
    try:
        made = make_page(page, args.results, spec)
        problems = quotes(args.results, spec, args.root) + size_problems(args.results, spec)
    except TableError as err:
        print(f"results table: {err}", file=sys.stderr)
        return 1
    if not args.check:
        args.page.write_text(made)
        print(f"{args.page}: {len(BLOCK.findall(made))} tables written")
    elif made != page:
        diff = difflib.unified_diff(page.splitlines(), made.splitlines(), "the page",
                                    "from the kept data", lineterm="", n=0)  # fmt: skip
        problems.insert(0, "the page's tables differ from the kept data:\n" + "\n".join(diff))
    for problem in problems:
        print(f"results table: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
