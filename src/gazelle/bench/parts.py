"""`gazelle bench` parts: env, inference and learner, each alone on one core.

Each part's rate is items per CPU-second of this process on one torch thread, so the rates
of parts measured one after another add up to the machine's limit (see `limit`). The
measurements themselves are the runtime's (`gazelle.runtime.part_costs`), which the layout
rule uses too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gazelle.config import Config
from gazelle.runtime.part_costs import best_rates, env_rate, inference_rate, learner_rate


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Per-core rates of env, inference and learner for `config`'s run.

    Each part's best of `rounds` interleaved rounds (`best_rates`): a limit built from the
    best rounds is the strictest one for the efficiency.
    """
    from gazelle.algorithms.common import env_kwargs
    from gazelle.algorithms.impala import build

    threads = torch.get_num_threads()
    run = build(config)  # builds the run's agent/learner; actors are not started
    torch.set_num_threads(1)
    try:
        cfg = run.config
        actors = cfg.actors
        # why: with central inference the server batches the envs of all actors (up to
        # --inference-max-batch), so inference alone is measured at that batch.
        batch = int(actors.envs_per_actor or 1)
        if actors.inference == "central":
            batch = actors.inference_max_batch or batch * int(actors.num_actors or 1)
        parts: dict[str, Callable[[float], float]] = {
            "env_steps_per_core_s": lambda s: env_rate(run.levels[0], env_kwargs(cfg), s),
            "inference_samples_per_core_s": lambda s: inference_rate(run, batch, s),
            "learner_samples_per_core_s": lambda s: learner_rate(run, s),
        }
        rates = best_rates(parts, seconds, rounds)
    finally:
        torch.set_num_threads(threads)
    return {
        "rates": rates,
        "config": run.config,
        "action_repeats": run.action_repeats,
        "inference_batch": batch,
    }


def limit(rates: dict[str, float], cores: int, action_repeats: int) -> float:
    """Frames/s the machine could reach if every core did only useful work."""
    core_seconds_per_step = sum(1.0 / r for r in rates.values())
    return cores / core_seconds_per_step * action_repeats
