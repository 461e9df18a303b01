"""The scaling table of docs/performance.md: frames/s against actors x envs per actor.

For each torso (with the LSTM, on Pong) and each layout it runs `gazelle bench` (each part
alone, then real training for a fixed wall time) and prints one JSON line per row, then a
markdown table with the part that limits the row: `learner` when the learner is busy at
least 90% of its time, `actors` when it waits for batches.

    python benchmarks/scaling.py --seconds 45
    python benchmarks/scaling.py --torsos deep --seconds 45
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gazelle.bench.train import run
from gazelle.config import Config

#: torso -> layouts (num_actors, envs_per_actor, learner_threads or None, precision).
GRID: dict[str, list[tuple[int, int, int | None, str]]] = {
    "shallow": [(1, 16, None, "fp32"), (2, 8, None, "fp32"), (2, 16, None, "fp32"),
                (2, 32, None, "fp32"), (2, 16, 2, "fp32")],
    "nature": [(1, 16, None, "fp32"), (1, 32, None, "fp32"), (2, 16, None, "fp32")],
    "deep": [(1, 16, None, "bf16"), (1, 16, 2, "bf16"), (1, 32, None, "bf16"),
             (1, 16, None, "fp32")],
}  # fmt: skip


def row(torso: str, out: dict[str, Any]) -> str:
    cfg = out["config"]
    threads = cfg["learner_threads"] or "auto"
    busy = out["learner_busy"]
    bound = "?" if busy is None else f"{out['bound']} (learner busy {busy:.0%})"
    return (
        f"| {torso} | {cfg['num_actors']} x {cfg['envs_per_actor']} | {threads} "
        f"| {cfg['precision']} | {out['fps']:,.0f} | {out['limit_fps']:,.0f} "
        f"| {out['efficiency']:.2f} | {bound} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--torsos", default=",".join(GRID))
    args = parser.parse_args()
    rows = []
    for torso in args.torsos.split(","):
        for actors, envs, threads, precision in GRID[torso]:
            config = Config.from_flat(
                dict(
                    env=args.env,
                    model=torso,
                    num_actors=actors,
                    envs_per_actor=envs,
                    learner_threads=threads,
                    precision=precision,
                )
            )
            out = run(config, seconds=args.seconds, verbose=False)
            print(json.dumps(out), flush=True)
            rows.append(row(torso, out))
    print("| torso | actors x envs | learner threads | precision | training fps | limit fps "
          "| efficiency | what limits it |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
