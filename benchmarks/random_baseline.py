"""Random-policy baselines: the mean return of uniform random actions, per level.

Each level is made as training makes it (`gazelle.envs.make`: ViZDoom at 4 tics per
action with the scenario's own buttons, Atari with its protocol, ...), and played for
`--episodes` whole games with actions drawn uniformly from its action space. What a
learning result is "above random" against (docs/results.md).

    python benchmarks/random_baseline.py --env VizdoomBasic-v1,VizdoomDefendCenter-v1 \
        --episodes 100 [--doom-actions combos]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from gazelle.envs import expand_levels, make


def random_returns(level: str, episodes: int, seed: int, **kwargs: object) -> list[float]:
    """Returns of `episodes` whole games of `level` under uniform random actions (`kwargs`:
    `make`'s, e.g. ViZDoom's `doom_actions`)."""
    env = make(level, seed=seed, **kwargs)
    env.action_space.seed(seed)
    returns: list[float] = []
    env.reset(seed=seed)
    total = 0.0
    while len(returns) < episodes:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        total += float(reward)
        if terminated or truncated:
            if info.get("game_over", True):
                returns.append(total)
                total = 0.0
            env.reset()
    env.close()
    return returns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="an --env: one id, a comma list, a suite")
    parser.add_argument("--episodes", type=int, default=100, help="whole games per level")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--doom-actions", default=None, help="ViZDoom: single | combos | ...")
    args = parser.parse_args(argv)
    kwargs = {} if args.doom_actions is None else {"doom_actions": args.doom_actions}
    for level in expand_levels(args.env):
        start = time.monotonic()
        returns = random_returns(level, args.episodes, args.seed, **kwargs)
        row = {
            "level": level,
            **kwargs,
            "episodes": len(returns),
            "mean_return": round(float(np.mean(returns)), 2),
            "std_return": round(float(np.std(returns)), 2),
            "stderr": round(float(np.std(returns) / np.sqrt(len(returns))), 2),
            "seconds": round(time.monotonic() - start, 1),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
