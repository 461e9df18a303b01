"""How steady the start-up layout is: the acting share `measure_costs` reads, repeated.

    python benchmarks/layout_noise.py BreakoutNoFrameskip-v4 shallow 6

Calls `gazelle.algorithms.layout.measure_costs` REPEATS times in one process, alternating one
round of 0.4 s per part (the rule until 2026-12-05) with the best of three rounds (the rule
now), and prints each mode's shares, how often it would choose 1 actor on 2 cores, and its
seconds per call. Results: docs/performance.md ("The default layout").
"""

from __future__ import annotations

import sys
import tempfile
import time

from gazelle.algorithms import layout
from gazelle.algorithms.common import prepare
from gazelle.config import Config

MODES = {"one round of 0.4 s": (0.4, 1), "best of 3 rounds": (0.75, 3)}


def main(env: str, torso: str, repeats: int) -> None:
    config = Config.of(env=env, model=torso, num_actors=2, logdir=tempfile.mkdtemp())
    config, found, device = prepare(config)
    rows: dict[str, list[tuple[layout.StepCosts, float]]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode, (seconds, rounds) in MODES.items():
            layout.MEASURE_S, layout.ROUNDS = seconds, rounds
            start = time.perf_counter()
            costs = layout.measure_costs(config, found, device)
            rows[mode].append((costs, time.perf_counter() - start))
    for mode, measured in rows.items():
        shares = " ".join(
            f"{c.acting_share:.3f}" for c, _ in sorted(measured, key=lambda r: r[0].acting_share)
        )
        ones = sum(layout.actors_for(c, cores=2) == 1 for c, _ in measured)
        learner = [c.learner_s * 1e3 for c, _ in measured]
        per_call = sum(s for _, s in measured) / len(measured)
        print(
            f"{env} {torso}, {mode}: shares {shares} | 1 actor on 2 cores {ones}/{len(measured)}"
            f" | learner {min(learner):.3f}-{max(learner):.3f} ms | {per_call:.2f} s per call"
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
