"""Training frames/s with central inference and each actor's envs in 1, 2, ... groups (A/B).

Runs `gazelle train --inference central --env-groups G` for each G in turn, round after
round (G1 G2 G1 G2 ...: a machine whose speed drifts moves both arms alike), each for
`--seconds`, and reads the run's own progress rows: frames/s from the first row after
`--warmup-s` to the last one (start-up and the first updates left out), the actors' seconds
per agent step waiting for inference and stepping envs, and the learner's wait for batches.
Prints a table, each round's ratio to the first G, and one JSON line.

    python benchmarks/env_groups.py --groups 1 2 --rounds 3 --seconds 45 -- \
        --env PongNoFrameskip-v4 --num-actors 2 --envs-per-actor 16

Flags after `--` go to every run (any `gazelle train` flag).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def steady(rows: list[dict[str, Any]], warmup_s: float) -> dict[str, float]:
    """Frames/s between the first row at or after `warmup_s` and the last row, and the
    medians of the timing rows over the same span."""
    rows = [r for r in rows if "frames" in r and "time" in r]
    start = next((i for i, r in enumerate(rows) if r["time"] >= warmup_s), None)
    if start is None or start >= len(rows) - 1:
        raise SystemExit(f"too few progress rows after {warmup_s}s: raise --seconds")
    first, last = rows[start], rows[-1]
    span = rows[start + 1 :]
    out = {"fps": (last["frames"] - first["frames"]) / (last["time"] - first["time"])}
    for key in ("timing/actor_inference_per_step", "timing/actor_env_per_step"):
        values = [r[key] for r in span if key in r]
        out[key.split("/")[1]] = statistics.median(values) if values else float("nan")
    waits = [r["timing/learner_wait"] for r in span if "timing/learner_wait" in r]
    out["learner_wait"] = statistics.median(waits) if waits else float("nan")
    return out


def run(groups: int, seconds: float, flags: list[str], warmup_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="gz-groups-") as logdir:
        command = [
            sys.executable, "-m", "gazelle.cli", "train", "--inference", "central",
            "--env-groups", str(groups), "--max-seconds", str(seconds), "--log-interval-s",
            "2", "--no-resume", "--quiet", "--logdir", logdir, *flags,
        ]  # fmt: skip
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        lines = (Path(logdir) / "progress.jsonl").read_text().splitlines()
        return steady([json.loads(line) for line in lines], warmup_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup-s", type=float, default=15.0)
    parser.add_argument("flags", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    flags = args.flags[1:] if args.flags[:1] == ["--"] else args.flags
    results: dict[int, list[dict[str, float]]] = {g: [] for g in args.groups}
    for round_ in range(args.rounds):
        for groups in args.groups:
            result = run(groups, args.seconds, flags, args.warmup_s)
            results[groups].append(result)
            print(
                f"round {round_ + 1} groups {groups}: {result['fps']:,.0f} frames/s, "
                f"actor wait {result['actor_inference_per_step'] * 1e3:.3f} ms/step, "
                f"env {result['actor_env_per_step'] * 1e3:.3f} ms/step",
                flush=True,
            )
    base = args.groups[0]
    print("\n| groups | frames/s, median (min-max) | ratio to first, each round | "
          "actor inference wait ms/step | env ms/step | learner wait s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    summary: dict[str, Any] = {"flags": flags, "seconds": args.seconds, "arms": {}}
    for groups, rows in results.items():
        fps = [r["fps"] for r in rows]
        ratios = [r["fps"] / b["fps"] for r, b in zip(rows, results[base], strict=True)]
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"| {groups} | {med['fps']:,.0f} ({min(fps):,.0f}-{max(fps):,.0f}) | "
            f"{', '.join(f'{x:.2f}' for x in ratios)} | "
            f"{med['actor_inference_per_step'] * 1e3:.3f} | "
            f"{med['actor_env_per_step'] * 1e3:.3f} | {med['learner_wait']:.3f} |"
        )
        summary["arms"][str(groups)] = {"runs": rows, "ratios": ratios}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
