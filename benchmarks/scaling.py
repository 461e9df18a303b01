"""The scaling table of docs/performance.md: frames/s against actors x envs per actor.

For each torso (on Pong, with the run's defaults otherwise: the `gazelle` preset) it runs
`gazelle bench` (each part alone, then real training for a fixed wall time) for the layout
gazelle chooses when no layout flag is given (`default`) and for each layout of the grid,
prints one JSON line per row, then a markdown table with the part that limits the row
(`learner` when the learner is busy at least 90% of its time, `actors` when it waits for
batches) and, per torso, the default layout's frames/s over the best row's.

    python benchmarks/scaling.py --seconds 40
    python benchmarks/scaling.py --torsos deep --seconds 40 --precision bf16
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gazelle.bench.train import run
from gazelle.config import Config

#: Layouts (num_actors, envs_per_actor) per torso; None, None: gazelle's choice.
LAYOUTS: list[tuple[int | None, int | None]] = [(None, None), (1, 16), (1, 32), (2, 16), (2, 32)]


def row(torso: str, out: dict[str, Any], default: bool) -> str:
    cfg = out["config"]
    threads = cfg["learner_threads"] or "auto"
    busy = out["learner_busy"]
    bound = "?" if busy is None else f"{out['bound']} (learner busy {busy:.0%})"
    layout = f"{cfg['num_actors']} x {cfg['envs_per_actor']}" + (" (default)" if default else "")
    return (
        f"| {torso} | {layout} | {threads} | {cfg['precision']} | {cfg['batch_size']} "
        f"| {out['fps']:,.0f} | {out['limit_fps']:,.0f} | {out['efficiency']:.2f} | {bound} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--torsos", default="shallow,nature,deep")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    args = parser.parse_args()
    rows, verdicts = [], []
    for torso in args.torsos.split(","):
        fps: dict[tuple[int | None, int | None], float] = {}
        for actors, envs in LAYOUTS:
            config = Config.from_flat(
                dict(
                    env=args.env,
                    model=torso,
                    num_actors=actors,
                    envs_per_actor=envs,
                    precision=args.precision,
                )
            )
            out = run(config, seconds=args.seconds, verbose=False)
            print(json.dumps(out), flush=True)
            fps[(actors, envs)] = out["fps"]
            rows.append(row(torso, out, default=actors is None))
        best = max(v for k, v in fps.items() if k != (None, None))
        verdicts.append(f"{torso}: default {fps[(None, None)] / best:.2f} of the best layout")
    print("| torso | actors x envs | learner threads | precision | B | training fps | limit fps "
          "| efficiency | what limits it |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
