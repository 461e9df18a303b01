"""The A3C default by measurement: each of the four ways gazelle's A3C agent may differ from
the universe-starter-agent's (docs/algorithms.md), with it and without it, over several
seeds at a fixed wall time, each run through `benchmarks/time_to_score.py`.

    python benchmarks/a3c_differences.py --out /work/runs/a3c-diff/pong \\
        --env PongNoFrameskip-v4 --seeds 1 2 --minutes 30 --threshold 18
    python benchmarks/a3c_differences.py --out /work/runs/a3c-diff/cartpole \\
        --env CartPole-v1 --seeds 1 2 --minutes 5 --threshold 475

Arms (`ARMS`): `gazelle` (all four points gazelle's way, the "without" of every
difference: the gazelle preset as it was before the grid), one arm per difference with that
point alone switched to the seed's way (the flag `--preset universe-starter` sets for it),
and `universe-starter` (all four the seed's way, and the seed's settings where the gazelle
preset has its own: vector tasks).
Each run is `gazelle train --algo a3c --env ENV --max-seconds S [flags] --seed N --logdir
OUT/ARM/seed-N`, stopped early by time_to_score.py once its 100-episode mean reaches the
threshold. Seeds are the outer loop (every arm's first seed, then every arm's second), so a
run cut short still holds one seed of every arm, and a slow drift of the machine does not
fall on one arm. A seed whose directory exists is not run again (delete it to rerun it).

Writes OUT/report.md and OUT/report.json (per arm and seed: the return at the end, its
frames, minutes to the threshold where reached; the median over seeds) and OUT/curves.png
(one panel per difference: its arm against `gazelle`, and the seed's agent against
`gazelle`; median of the seeds with a min-max band, against minutes from launch); each arm's
own report and curves are in OUT/ARM. `--dry-run` prints the commands; `--report` only
summarises what OUT holds. Nothing else should run on the machine meanwhile (the budget is
wall time). Ctrl-C or `kill` stops the running seed as its budget would (saved) and starts
no later one. `gazelle` is whatever the shell finds: from a worktree, set PYTHONPATH=src.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import time_to_score as tts  # noqa: E402

#: The gazelle preset as it was when the grid began: since the grid chose rollouts that end
#: at an episode's end (docs/results.md), the preset is the `end-at-episode-end` arm, and
#: the other arms ask for fixed-length rollouts to stay the runs they were.
_FIXED = ["--no-end-rollout-at-episode-end"]
#: The Adam step and clip the grid ran with, per env family, where the gazelle preset has
#: changed them since (Atari: the seed's 1e-4 and 40; 2e-4 and 15 since 2026-12-03): every
#: arm but `universe-starter` (which sets the seed's own) asks for them.
_GRID_OPTIMISER = {"atari": ["--learning-rate", "0.0001", "--grad-norm-clip", "40"]}
#: Arm -> (what it is, flags added to `gazelle train --algo a3c`). Each difference's flag is
#: the value `--preset universe-starter` sets
#: (gazelle.algorithms.a3c.presets.UNIVERSE_STARTER_AGENT).
ARMS: dict[str, tuple[str, list[str]]] = {
    "gazelle": ("gazelle's way in all four", _FIXED),
    "features-alone": (
        "LSTM inputs: the conv features alone",
        ["--no-last-action-reward", *_FIXED],
    ),
    "init-universe": ("init: the starter agent's", ["--init", "universe", *_FIXED]),
    "acting-values": ("advantages: acting-time values", ["--advantage-values", "acting", *_FIXED]),
    "end-at-episode-end": ("rollouts: end at the episode's end", ["--end-rollout-at-episode-end"]),
    "universe-starter": ("the seed's agent", ["--preset", "universe-starter"]),
}
BASELINE = "gazelle"
#: Extra wall time time_to_score.py allows over the run's own --max-seconds (start-up, the
#: final save) before it stops the run itself.
GRACE_MINUTES = 2.0


def env_kind(env: str) -> str:
    """The registry's kind of `env` (atari, vector, ...); an id it cannot resolve: ``""``."""
    from gazelle.envs import registry

    try:
        return str(registry.resolve(env).kind)
    except (ValueError, ImportError):
        return ""


def train_command(env: str, minutes: float, arm: str) -> list[str]:
    """The training command of one arm (time_to_score.py adds --seed and --logdir)."""
    seconds = int(minutes * 60)
    optimiser = [] if arm == "universe-starter" else _GRID_OPTIMISER.get(env_kind(env), [])
    return ["gazelle", "train", "--algo", "a3c", "--env", env, "--max-seconds", str(seconds),
            *ARMS[arm][1], *optimiser]  # fmt: skip


def run_command(args: argparse.Namespace, arm: str, seed: int) -> list[str]:
    """time_to_score.py's command for one seed of one arm."""
    return [
        sys.executable, str(HERE / "time_to_score.py"), "--out", str(args.out / arm),
        "--seeds", str(seed), "--threshold", str(args.threshold),
        "--max-minutes", str(args.minutes + GRACE_MINUTES),
        "--speed-check-s", str(args.speed_check_s),
        "--title", f"{args.env}, A3C: {ARMS[arm][0]}",
        "--", *train_command(args.env, args.minutes, arm),
    ]  # fmt: skip


def run_one(command: list[str]) -> int:
    """Run one seed of one arm (time_to_score.py) to its end; if this script is stopped
    (Ctrl-C, `kill`), stop it the way it stops its run, wait for it, and raise."""
    # why: a session of its own, so a terminal's Ctrl-C reaches this script only, which then
    # tells the child once (SIGTERM: time_to_score.py stops its run, saved, and exits) and
    # waits. `subprocess.run` SIGKILLed the child 0.25 s after a Ctrl-C, before it could
    # stop its run (in a session of its own too), and `kill` of this script left it running.
    child = subprocess.Popen(command, start_new_session=True)
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.terminate()
        child.wait()
        raise


def plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(arm, seed) in the order they run: seeds outer, arms inner; done ones left out."""
    return [
        (arm, seed)
        for seed in args.seeds
        for arm in args.arms
        if not (args.out / arm / f"seed-{seed}").exists()
    ]


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    """Per arm: what time_to_score.py's summary says of each seed's run, and the median."""
    arms: dict[str, Any] = {}
    for arm in ARMS:
        if not any((args.out / arm).glob("seed-*")):
            continue
        # why: from the runs themselves, not the arm's report.json: kept runs
        # (benchmarks/keep_runs.py) hold only their launch file and progress rows.
        tts_args = argparse.Namespace(threshold=args.threshold, window=tts.WINDOW)
        report = tts.summarise(args.out / arm, tts_args)
        seeds = {s["seed"]: s for s in report["seeds"] if s["seed"] in args.seeds}
        ends = [s["end_return"] for s in seeds.values() if s["end_return"] is not None]
        minutes = [s["reached"]["minutes"] for s in seeds.values() if s.get("reached")]
        arms[arm] = {
            "what": ARMS[arm][0],
            "flags": ARMS[arm][1],
            "seeds": seeds,
            "median": statistics.median(ends) if ends else None,
            "reached": f"{len(minutes)} of {len(args.seeds)}",
            # why: a median of times to the threshold only where every seed has one (a seed
            # that never reached it has no time, and leaving it out would flatter the arm).
            "median_minutes": (
                statistics.median(minutes) if len(minutes) == len(args.seeds) else None
            ),
        }
    return {
        "env": args.env, "minutes": args.minutes, "threshold": args.threshold,
        "seeds": args.seeds, "arms": arms,
    }  # fmt: skip


def markdown(summary: dict[str, Any]) -> str:
    seeds = summary["seeds"]
    lines = [
        f"{summary['env']}, A3C, {summary['minutes']:g} minutes per run. Cells: the mean "
        f"return of the last 100 episodes at the end (env frames); where the threshold "
        f"{summary['threshold']:g} was reached, the run stopped there and the cell adds "
        "the minutes from launch to it. Median: of the returns at the end; to the "
        "threshold: the median minutes where every seed reached it, else how many did.",
        "",
        "| arm | flags | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | median | to the threshold |",
        "| --- | --- | " + " | ".join("---" for _ in seeds) + " | --- | --- |",
    ]
    for arm, got in summary["arms"].items():
        cells = []
        for seed in seeds:
            one = got["seeds"].get(seed)
            if one is None or one["end_return"] is None:
                cells.append("-")
                continue
            cell = f"{one['end_return']:.1f} ({one['end_frames'] / 1e6:.2f}M)"
            if one["reached"]:
                cell += f", {summary['threshold']:g} at {one['reached']['minutes']:.1f} min"
            cells.append(cell)
        median = "-" if got["median"] is None else f"{got['median']:.1f}"
        to_threshold = (
            f"{got['reached']} seeds" if got["median_minutes"] is None
            else f"{got['median_minutes']:.1f} min"
        )  # fmt: skip
        flags = f"`{shlex.join(got['flags'])}`" if got["flags"] else "(none)"
        lines.append(
            f"| {arm}: {got['what']} | {flags} | {' | '.join(cells)} | {median} | {to_threshold} |"
        )
    return "\n".join(lines) + "\n"


def curves(out: Path, arm: str, seeds: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each seed's (minutes from launch, recent mean return) of one arm."""
    series = []
    for seed in seeds:
        logdir = out / arm / f"seed-{seed}"
        if not (logdir / tts.LAUNCH_FILE).exists():
            continue
        launched = tts.read_launch(logdir)["launched"]
        rows = [r for r in tts.rows_of(logdir) if r.get("episode_return") is not None]
        if rows:
            minutes = np.array([(r["wall_time"] - launched) / 60 for r in rows], dtype=float)
            series.append((minutes, np.array([r["episode_return"] for r in rows], dtype=float)))
    return series


def draw(out: Path, summary: dict[str, Any]) -> Path:
    """One panel per arm but the baseline: it against `gazelle`, median and min-max."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from gazelle.plot.runs import aggregate

    others = [arm for arm in ARMS if arm != BASELINE]
    fig = Figure(figsize=(4 * len(others), 3.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(others), sharey=True)
    for ax, arm in zip(axes, others):
        for name, color in ((BASELINE, "C0"), (arm, "C1")):
            series = curves(out, name, summary["seeds"])
            if not series:
                continue
            for xs, ys in series:
                ax.plot(xs, ys, color=color, alpha=0.3, linewidth=0.7)
            grid, middle, low, high = aggregate(series, center="median")
            ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
            ax.plot(grid, middle, color=color, linewidth=2,
                    label=f"{name} (median of {len(series)})")  # fmt: skip
        ax.axhline(summary["threshold"], color="k", linestyle=":", linewidth=1)
        ax.set_title(ARMS[arm][0], fontsize="medium")
        ax.set_xlabel("minutes from launch")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize="small")
        else:  # why: an arm not run yet gets a said-so panel, not an empty legend's warning
            ax.text(0.5, 0.5, "not run yet", transform=ax.transAxes, ha="center", color="0.5")
    axes[0].set_ylabel("return (mean of the last 100 episodes)")
    fig.suptitle(f"{summary['env']}, A3C: each difference against the gazelle preset")
    path = out / "curves.png"
    fig.savefig(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--minutes", type=float, required=True, help="wall time of each run")
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--speed-check-s", type=float, default=10.0,
                        help="time_to_score.py's speed check, seconds (0: none)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--report", action="store_true", help="only summarise OUT")
    args = parser.parse_args(argv)
    if not args.report:
        if not args.dry_run:
            signal.signal(signal.SIGTERM, tts.interrupt)  # `kill` stops as Ctrl-C does
        for arm, seed in plan(args):
            command = run_command(args, arm, seed)
            print(shlex.join(command), flush=True)
            if not args.dry_run:
                run_one(command)
    if args.dry_run:
        return 0
    summary = summarise(args)
    table = markdown(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(table)
    (args.out / "report.json").write_text(json.dumps(summary, indent=1))
    if summary["arms"]:
        print(f"curves: {draw(args.out, summary)}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
