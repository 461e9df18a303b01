"""The efficiency targets of docs/performance.md, in one command.

Runs `gazelle bench` (real training for a fixed wall time, plus each part alone) on Pong for
the shallow, nature and deep torsos with the LSTM, each in the configuration that measured
best on a 2-core CPU, and prints one JSON line per torso plus a summary table.

    python benchmarks/efficiency.py --seconds 60
"""

from __future__ import annotations

import argparse
import json

from gazelle.bench.train import run
from gazelle.config import Config

#: torso -> the config measured best on 2 cores (see docs/performance.md).
CONFIGS = {
    "shallow": dict(num_actors=2, envs_per_actor=32),
    "nature": dict(num_actors=1, envs_per_actor=32),
    "deep": dict(num_actors=1, envs_per_actor=16, precision="bf16"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--torsos", default=",".join(CONFIGS))
    args = parser.parse_args()
    results = []
    for torso in args.torsos.split(","):
        config = Config.from_flat({"env": args.env, "model": torso, **CONFIGS[torso]})
        results.append(run(config, seconds=args.seconds, verbose=False))
        print(json.dumps(results[-1]), flush=True)
    print(f"{'torso':<8} {'fps':>8} {'limit':>8} {'efficiency':>10}")
    for torso, out in zip(args.torsos.split(","), results):
        fps, limit, eff = out["fps"], out["limit_fps"], out["efficiency"]
        print(f"{torso:<8} {fps:>8,.0f} {limit:>8,.0f} {eff:>10.2f}")


if __name__ == "__main__":
    main()
