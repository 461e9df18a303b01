"""Time to score: run one training command for several seeds, back to back on this machine,
each until its recent mean return reaches a threshold or a wall/frame budget runs out, and
report when each seed first got there, in minutes from launch and in env frames.

    python benchmarks/time_to_score.py --out /work/runs/tts/pong --seeds 1 2 3 \\
        --threshold 18 --max-minutes 40 -- gazelle train --env PongNoFrameskip-v4

The command gets `--seed S --logdir OUT/seed-S` appended (so it must not set them). A seed
counts as having reached the threshold at the first progress row whose `episode_return`
(the mean of the last `--window` episodes, `gazelle.logging`) is >= the threshold with the
window full; the run is then stopped with SIGINT (it saves its checkpoint and exits), as it
is when the budget runs out. Minutes count from the command's launch, so start-up (env
probe, the layout measurement) is part of the time, as a user waits for it.

`--run-to-budget` keeps each seed running past the threshold to its budget (the command's
own end, `--max-frames` or `--max-minutes`), still recording when it got there: the report
then also gives every seed's return at the end, the mean of its last `--window` episodes at
the budget, and their mean and standard deviation over the seeds (the form in which PPO's
MuJoCo results are published, e.g. "1,442 +- 46 at 1M steps").

Writes OUT/report.md (per seed; the seeds that reached out of those run; the median over
seeds with a seed that missed counted as not reached, never dropped, and min/max),
OUT/report.json and OUT/curves.png (return against frames and against minutes: median of
the seeds with a min-max band). Kept runs (`keep_runs.py`, a gzipped `progress.jsonl.gz`)
are read as well.
`--report` only reads what OUT/seed-* already hold (e.g. to redraw after a change).
Nothing else should run on the machine meanwhile: the minutes are wall time.

Ctrl-C, or `kill PID` (SIGTERM), stops the running seed as its budget would (it saves) and
starts no later seed. Started in the background (`nohup ... &`), the benchmark inherits
SIGINT ignored from the shell, so there `kill -INT` does nothing: use `kill`.

Machines drift: the same A3C code ran at 1,962 frames/s and, an hour later on the same
machine, at 1,386. So before and after each seed the benchmark times a fixed CPU workload
(`machine_speed`, `--speed-check-s` seconds; 0 skips it), records both in the seed's
launch.json and reports them, and the report warns when the speeds it holds differ by more
than `DRIFT` (those seeds' minutes are not comparable; their frames are).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

LAUNCH_FILE = "launch.json"
#: Episodes the mean must span (the logger's window, gazelle.logging).
WINDOW = 100
#: Speeds (the slowest over the fastest) below 1 - DRIFT are reported as drift.
DRIFT = 0.15


def machine_speed(seconds: float) -> float | None:
    """Iterations per second of a fixed CPU workload, the size of an RL actor's and learner's
    work on this machine's CPU: a small conv net's forward and backward on one 42x42 frame,
    torch on one thread (the benchmark's process only; the runs are other processes).
    None when `seconds` is 0."""
    if seconds <= 0:
        return None
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3, stride=2, padding=1), nn.ELU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ELU(),
        nn.Flatten(), nn.Linear(32 * 11 * 11, 256), nn.ELU(), nn.Linear(256, 6),
    )  # fmt: skip
    frame = torch.rand(1, 1, 42, 42)

    def step() -> None:
        net.zero_grad(set_to_none=True)
        net(frame).logsumexp(-1).sum().backward()

    for _ in range(20):  # why: the first calls pay for allocation and dispatch set-up
        step()
    iterations, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        iterations += 1
    return iterations / elapsed


def rows_of(logdir: Path) -> list[dict[str, Any]]:
    """The progress rows of a run directory: its `progress.jsonl`, or the `progress.jsonl.gz`
    that `keep_runs.py` keeps in the repository (benchmarks/results)."""
    path = logdir / "progress.jsonl"
    if path.exists():
        text = path.read_text()
    elif path.with_suffix(".jsonl.gz").exists():
        text = gzip.decompress(path.with_suffix(".jsonl.gz").read_bytes()).decode()
    else:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of a run still writing
    return rows


def first_at(
    rows: list[dict[str, Any]], threshold: float, window: int, launched: float
) -> dict[str, float] | None:
    """The first row at or above `threshold` with a full window: frames and minutes."""
    for row in rows:
        value, count = row.get("episode_return"), row.get("episode_window", window)
        if value is not None and value >= threshold and count >= window:
            return {"frames": row["frames"], "minutes": (row["wall_time"] - launched) / 60.0}
    return None


def median_counting_misses(values: list[float], runs: int) -> float:
    """The median over `runs` seeds, of which those that reached the threshold gave `values`:
    a seed that did not reach it counts as later than every seed that did (inf), never as
    absent. So the median is inf (not reached) once half the seeds or more missed; with
    3 seeds of which one missed it is the slower of the two that reached.

        median_counting_misses([26.5, 27.6], 3) == 27.6    # the third seed: not reached
        median_counting_misses([38.3], 2) == inf            # one of two: not a median reached
    """
    if runs < max(len(values), 1):
        raise ValueError(f"{len(values)} values from {runs} runs: runs must be at least 1 and "
                         "at least the number of values")  # fmt: skip
    return statistics.median(sorted(values) + [math.inf] * (runs - len(values)))


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a run as Ctrl-C would: SIGINT to its whole process group (it saves and exits),
    then SIGKILL if it has not exited within 5 minutes."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def run_seed(command: list[str], logdir: Path, seed: int, args: argparse.Namespace) -> None:
    """Launch one seed and stop it at the threshold or the budget."""
    logdir.mkdir(parents=True, exist_ok=True)
    full = [*command, "--seed", str(seed), "--logdir", str(logdir)]
    before = machine_speed(args.speed_check_s)
    launched = time.time()
    launch = {"launched": launched, "command": full, "speed_before": before}
    (logdir / LAUNCH_FILE).write_text(json.dumps(launch))
    with open(logdir / "console.log", "wb") as console:
        # why: a session of its own, so a terminal's Ctrl-C reaches this loop only, which
        # then stops the run through `stop` (and the budget's stop reaches the whole run).
        process = subprocess.Popen(full, stdout=console, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
        reason = "the command ended"
        try:
            while process.poll() is None:
                time.sleep(args.poll_s)
                rows = rows_of(logdir)
                minutes = (time.time() - launched) / 60.0
                frames = rows[-1]["frames"] if rows else 0
                reached = first_at(rows, args.threshold, args.window, launched)
                if reached and not getattr(args, "run_to_budget", False):
                    reason = "reached the threshold"
                elif minutes >= args.max_minutes:
                    reason = f"{args.max_minutes:g} minutes"
                elif frames >= args.max_frames:
                    reason = f"{args.max_frames:,.0f} frames"
                else:
                    continue
                stop(process)
                break
        except KeyboardInterrupt:
            # why: without this the run, in its own session, outlived the benchmark and held
            # the machine; Ctrl-C stops the run (saved) and the benchmark, no later seed.
            print(f"seed {seed}: interrupted; stopping its run", file=sys.stderr)
            stop(process)
            raise
    stopped = (time.time() - launched) / 60
    # why: measured after the run has exited, so the two checks see the same idle machine.
    launch["speed_after"] = machine_speed(args.speed_check_s)
    (logdir / LAUNCH_FILE).write_text(json.dumps(launch))
    print(f"seed {seed}: stopped ({reason}) after {stopped:.1f} min")


def read_launch(logdir: Path) -> dict[str, Any]:
    """A seed's launch.json, with a clear error when it lacks a key that `run_seed` writes
    (a hand-made or truncated one) instead of a bare KeyError from deep in the report."""
    path = logdir / LAUNCH_FILE
    launch = json.loads(path.read_text())
    missing = [key for key in ("launched", "command") if key not in launch]
    if missing:
        raise SystemExit(
            f"{path} lacks {', '.join(map(repr, missing))}: a seed's launch.json needs "
            "'launched' (the launch's Unix time) and 'command' (the argv list), as run_seed "
            "writes them"
        )
    return launch


def summarise(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Per seed: when it reached the threshold (or not) and where it ended."""
    seeds = []
    for logdir in sorted(out.glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        launch = read_launch(logdir)
        rows = rows_of(logdir)
        if not rows:
            continue
        last = rows[-1]
        seeds.append({
            "seed": int(logdir.name.split("-")[1]),
            "launched": launch["launched"],
            "reached": first_at(rows, args.threshold, args.window, launch["launched"]),
            "end_frames": last["frames"],
            "end_minutes": (last["wall_time"] - launch["launched"]) / 60.0,
            "end_return": last.get("episode_return"),
            "fps": last.get("fps"),
            "speed": [launch.get("speed_before"), launch.get("speed_after")],
            "command": launch["command"],
        })  # fmt: skip
    reached = [s["reached"] for s in seeds if s["reached"]]
    summary: dict[str, Any] = {
        "threshold": args.threshold, "window": args.window, "seeds": seeds,
        "reached": f"{len(reached)} of {len(seeds)}", "drift": drift(seeds),
    }  # fmt: skip
    for key in ("minutes", "frames"):
        values = [r[key] for r in reached]
        if values:
            # why: a seed that missed counts as not reached (later than any), never dropped;
            # None (JSON null) stands for "not reached" in the median and the max.
            median = median_counting_misses(values, len(seeds))
            summary[key] = {
                "median": None if math.isinf(median) else median, "min": min(values),
                "max": max(values) if len(reached) == len(seeds) else None,
            }  # fmt: skip
    ends = [s["end_return"] for s in seeds]
    if seeds and all(value is not None for value in ends):
        # why: every seed or none: a seed without a return at its end is not dropped from
        # the mean, the mean is not given.
        summary["end_return"] = {
            "mean": statistics.fmean(ends),
            "std": statistics.pstdev(ends),
            "median": statistics.median(ends),
            "min": min(ends),
            "max": max(ends),
            "seeds": len(ends),
        }
    return summary


def drift(seeds: list[dict[str, Any]]) -> float | None:
    """How much the machine's speed checks varied over the seeds' runs: 1 - slowest/fastest
    (None with fewer than two checks)."""
    speeds = [v for s in seeds for v in s.get("speed", []) if v is not None]
    if len(speeds) < 2:
        return None
    return 1.0 - min(speeds) / max(speeds)


def markdown(summary: dict[str, Any]) -> str:
    def cell(seed: dict[str, Any], key: str) -> str:
        reached = seed["reached"]
        if not reached:
            return "not reached"
        return f"{reached[key]:.1f}" if key == "minutes" else f"{reached[key] / 1e6:.2f}M"

    lines = [
        f"Threshold {summary['threshold']:g} (mean of the last {summary['window']} episodes); "
        f"reached by {summary['reached']} seeds.",
        "",
        "| seed | minutes to threshold | frames to threshold | end: minutes / frames / return "
        "| frames/s | machine speed check: before / after (it/s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for seed in summary["seeds"]:
        end_return = seed["end_return"]
        shown = "-" if end_return is None else f"{end_return:.1f}"
        speeds = " / ".join("-" if v is None else f"{v:,.0f}" for v in seed.get("speed", []))
        lines.append(
            f"| {seed['seed']} | {cell(seed, 'minutes')} | {cell(seed, 'frames')} | "
            f"{seed['end_minutes']:.1f} / {seed['end_frames'] / 1e6:.2f}M / {shown} | "
            f"{seed['fps'] or 0:,.0f} | {speeds or '-'} |"
        )
    if "minutes" in summary:
        m, f = summary["minutes"], summary["frames"]

        def shown(value: float | None, scale: float, unit: str) -> str:
            return "not reached" if value is None else f"{value / scale:.{2 if unit else 1}f}{unit}"

        lines.append(
            f"| **median**, misses counted (min-max) | **{shown(m['median'], 1, '')}** "
            f"({shown(m['min'], 1, '')}-{shown(m['max'], 1, '')}) | "
            f"**{shown(f['median'], 1e6, 'M')}** ({shown(f['min'], 1e6, 'M')}-"
            f"{shown(f['max'], 1e6, 'M')}) | | | |"
        )
    if "end_return" in summary:
        e = summary["end_return"]
        lines += ["", f"Return at the end (mean of the last {summary['window']} episodes): "
                  f"**{e['mean']:,.1f} +- {e['std']:,.1f}** (mean +- std over {e['seeds']} "
                  f"seeds; median {e['median']:,.1f}, min {e['min']:,.1f}, max "
                  f"{e['max']:,.1f})."]  # fmt: skip
    if summary.get("drift") is not None and summary["drift"] > DRIFT:
        lines += ["", f"**The machine drifted**: its speed checks differ by "
                  f"{summary['drift']:.0%} over these runs, so their minutes are not "
                  "comparable; compare their frames."]  # fmt: skip
    if summary["seeds"]:
        lines += ["", "Command: `" + " ".join(summary["seeds"][0]["command"][:-4]) + "`"]
    return "\n".join(lines) + "\n"


def draw(out: Path, summary: dict[str, Any], title: str) -> Path:
    """Return against frames and against minutes: median of the seeds, min-max band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from gazelle.plot.runs import aggregate

    curves: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"frames": [], "minutes": []}
    for seed in summary["seeds"]:
        logdir = out / f"seed-{seed['seed']}"
        launched = seed["launched"]
        rows = [r for r in rows_of(logdir) if r.get("episode_return") is not None]
        ys = np.array([r["episode_return"] for r in rows], dtype=float)
        curves["frames"].append((np.array([r["frames"] for r in rows], dtype=float), ys))
        minutes = np.array([(r["wall_time"] - launched) / 60 for r in rows], dtype=float)
        curves["minutes"].append((minutes, ys))
    fig = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, (key, label) in zip(axes, [("frames", "env frames (M)"), ("minutes", "minutes")]):
        series = [(xs, ys) for xs, ys in curves[key] if len(xs)]
        if not series:
            continue
        for xs, ys in series:  # each seed, thin
            ax.plot(xs / (1e6 if key == "frames" else 1), ys, color="0.75", linewidth=0.8)
        grid, middle, low, high = aggregate(series, center="median")
        scale = 1e6 if key == "frames" else 1
        ax.fill_between(grid / scale, low, high, alpha=0.3, linewidth=0, label="min-max")
        ax.plot(grid / scale, middle, linewidth=2, label=f"median of {len(series)} seeds")
        ax.axhline(summary["threshold"], color="k", linestyle=":", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel("return (recent mean, up to 100 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    path = out / "curves.png"
    fig.savefig(path)
    return path


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the seeds' runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--window", type=int, default=WINDOW, help="episodes the mean must span")
    parser.add_argument("--max-minutes", type=float, default=60.0)
    parser.add_argument("--max-frames", type=float, default=float("inf"))
    parser.add_argument("--poll-s", type=float, default=2.0)
    parser.add_argument("--title", default=None)
    parser.add_argument("--speed-check-s", type=float, default=10.0,
                        help="seconds of the machine speed check before and after each seed "
                        "(0: none)")  # fmt: skip
    parser.add_argument("--run-to-budget", action="store_true",
                        help="do not stop a seed at the threshold: run it to its budget "
                        "(its return at the end is reported)")  # fmt: skip
    parser.add_argument("--report", action="store_true", help="only report what OUT holds")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the training command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.report:
        # why: `kill` of the benchmark stops its run as Ctrl-C does (run_seed), not orphans it.
        signal.signal(signal.SIGTERM, interrupt)
        if not command:
            parser.error("give the training command after --")
        if any(flag in command for flag in ("--seed", "--logdir")):
            parser.error("the command must not set --seed or --logdir (the benchmark does)")
        for seed in args.seeds:
            run_seed(command, args.out / f"seed-{seed}", seed, args)
    summary = summarise(args.out, args)
    table = markdown(summary)
    (args.out / "report.md").write_text(table)
    (args.out / "report.json").write_text(json.dumps(summary, indent=1))
    if summary["seeds"]:
        title = args.title or " ".join(summary["seeds"][0]["command"][:-4])
        print(f"curves: {draw(args.out, summary, title)}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
