"""`gazelle bench`'s parts of an IMPALA (or APPO) run: env, inference and learner, each
alone on one core, on the run's own agent and learner (`Algorithm.measure_parts`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from gazelle.config import Config
from gazelle.runtime import part_costs


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Per-core rates of env, inference and learner for `config`'s run.

    Each part's best of `rounds` interleaved rounds (`best_rates`): a limit built from the
    best rounds is the strictest one for the efficiency.
    """
    from gazelle.algorithms.impala.build import build

    threads = torch.get_num_threads()
    # why: a part's cost is one learner's on one core, whatever --learners the run has
    run = build(config.replace(learners=1))  # the agent/learner; actors are not started
    torch.set_num_threads(1)
    try:
        cfg = run.config
        actors = cfg.actors
        # why: with central inference the server batches the envs of all actors (up to
        # --inference-max-batch), so inference alone is measured at that batch.
        batch = int(actors.envs_per_actor or 1)
        if actors.inference == "central":
            batch = actors.inference_max_batch or batch * int(actors.num_actors or 1)
        make_env = functools.partial(run.probe.make, run.levels[0], seed=0)
        parts: dict[str, Callable[[float], float]] = {
            "env_steps_per_core_s": lambda s: part_costs.env_rate(make_env, s),
            "inference_samples_per_core_s": lambda s: part_costs.inference_rate(
                cfg, run.obs_spec, batch, s
            ),
            "learner_samples_per_core_s": lambda s: part_costs.learner_rate(
                run.learner, run.obs_spec, run.unroll_length, run.batch_size, s
            ),
        }
        rates = part_costs.best_rates(parts, seconds, rounds)
    finally:
        torch.set_num_threads(threads)
    return {
        "rates": rates,
        "config": run.config,
        "action_repeats": run.action_repeats,
        "inference_batch": batch,
    }
