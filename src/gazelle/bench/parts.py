"""`gazelle bench` parts: env, inference and learner, each alone on one core.

Each part's rate is items per CPU-second of this process on one torch thread, so the rates
of parts measured one after another add up to the machine's limit (see `limit`). What the
parts are is the algorithm's (`Algorithm.measure_parts` in `gazelle.config.registry`: IMPALA's
and APPO's `gazelle.algorithms.impala.parts`, A3C's `gazelle.algorithms.a3c.parts`); the
measurements themselves are the runtime's (`gazelle.runtime.part_costs`), which the layout
rule uses too.
"""

from __future__ import annotations

from typing import Any

from gazelle.config import Config, registry


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Per-core rates of `config`'s run's parts, as its algorithm measures them: `rates`
    (env steps, inference samples, learner samples per core-second), the resolved `config`,
    `action_repeats` and `inference_batch`."""
    measure = registry.algorithm(config.algo).measure_parts
    if measure is None:
        raise ValueError(f"--algo {config.algo}: no parts to measure for gazelle bench")
    return measure(config, seconds, rounds)


def limit(rates: dict[str, float], cores: int, action_repeats: int) -> float:
    """Frames/s the machine could reach if every core did only useful work."""
    core_seconds_per_step = sum(1.0 / r for r in rates.values())
    return cores / core_seconds_per_step * action_repeats
