"""`gazelle bench --algo a3c` parts (`Algorithm.measure_parts`): what one A3C worker does
per agent step, alone on one core: step its envs, run its local policy on them (batch = envs
per worker), and its share of an update (loss, gradient, clip, the shared Adam push). The
machine's limit is then `cores / (env + inference + update core-seconds per step)` agent
steps/s, as for IMPALA."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from gazelle.config import Config
from gazelle.distributions import random_actions
from gazelle.runtime.part_costs import env_rate, fake_obs, per_core_rate


def measure_a3c_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Per-core rates of env steps, local inference and the worker's update for `config`."""
    from gazelle.algorithms.a3c.loop import a3c_agent, shared_adam
    from gazelle.algorithms.a3c.worker import train_step, trainer_settings
    from gazelle.algorithms.common import prepare

    threads = torch.get_num_threads()
    config, found, _ = prepare(config)
    torch.set_num_threads(1)
    try:
        model, a3c, spec = config.model, config.a3c, found.obs_spec
        envs = int(config.actors.envs_per_actor or 1)
        steps = a3c.unroll_length
        assert model.use_lstm is not None and a3c.learning_rate is not None
        # why: the run's own network (its --init and core inputs), as the workers build it.
        agent, local = a3c_agent(config, spec), a3c_agent(config, spec)
        server = shared_adam(config, 1)(agent)
        settings = trainer_settings(config, found.action_repeats)
        rollout: dict[str, torch.Tensor] = {
            **fake_obs(spec, (steps + 1, envs)),
            "action": random_actions(spec.actions, (steps + 1, envs)),
            "reward": torch.randn(steps + 1, envs),
            "terminated": torch.zeros(steps + 1, envs, dtype=torch.bool),
            "truncated": torch.zeros(steps + 1, envs, dtype=torch.bool),
            "truncation_value": torch.zeros(steps + 1, envs),
            "baseline": torch.zeros(steps + 1, envs),
            "bootstrap": torch.zeros(envs),
        }
        if model.use_lstm:
            rollout["state_h"], rollout["state_c"] = agent.initial_state(envs)
        obs = fake_obs(spec, (envs,))
        state = agent.initial_state(envs)
        zeros = torch.from_numpy(spec.actions.zeros(envs)), torch.zeros(envs)
        done = torch.zeros(envs, dtype=torch.bool)

        def act() -> int:
            local.act(obs, zeros[0], zeros[1], done, state)
            return envs

        def update() -> int:
            train_step(local, server, rollout, settings, 0)
            return steps * envs

        parts: dict[str, Callable[[float], float]] = {
            "env_steps_per_core_s": functools.partial(
                env_rate, functools.partial(found.make, found.levels[0], seed=0)
            ),
            "inference_samples_per_core_s": lambda s: per_core_rate(act, s),
            "learner_samples_per_core_s": lambda s: per_core_rate(update, s),
        }
        rates = {name: 0.0 for name in parts}
        for _ in range(max(1, rounds)):
            for name, measure in parts.items():
                rates[name] = max(rates[name], measure(seconds / max(1, rounds)))
    finally:
        torch.set_num_threads(threads)
    return {
        "rates": rates,
        "config": config,
        "action_repeats": found.action_repeats,
        "inference_batch": envs,
    }
