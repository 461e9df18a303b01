"""`gazelle bench` parts: env, inference and learner, each alone on one core.

Each part's rate is items per CPU-second of this process on one torch thread, so the rates
of parts measured one after another add up to the machine's limit (see `limit`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gazelle.config import Config


def _per_core_rate(fn: Callable[[], int], seconds: float) -> float:
    """Items per CPU-second of this process (one thread), calling fn until `seconds` pass."""
    fn()  # warm up (allocations, lazy init)
    items, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        items += fn()
    return items / max(time.process_time() - cpu0, 1e-9)


def env_rate(level: str, env_kwargs: dict[str, Any], seconds: float) -> float:
    """Agent steps per core-second, random actions."""
    from gazelle.envs import make

    env = make(level, seed=0, **env_kwargs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n = int(env.action_space.n)  # type: ignore[attr-defined]

    def steps() -> int:
        for _ in range(100):
            _, _, terminated, truncated, _ = env.step(int(rng.integers(n)))
            if terminated or truncated:
                env.reset()
        return 100

    try:
        return _per_core_rate(steps, seconds)
    finally:
        env.close()


def _fake_obs(spec: Any, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    frame_shape = (*shape, *spec.frame_shape)
    if spec.is_image:
        obs = {"frame": torch.randint(0, 255, frame_shape, dtype=torch.uint8)}
    else:
        obs = {"frame": torch.randn(frame_shape)}
    if spec.has_instruction:
        obs["instruction"] = torch.randint(1, 1000, (*shape, 8))
    return obs


def inference_rate(run: Any, batch: int, seconds: float) -> float:
    """`Agent.act` samples per core-second at `batch` envs."""
    from gazelle.models import build_agent

    model = run.config.model
    agent = build_agent(run.obs_spec, model.torso, model.use_lstm).eval()
    obs = _fake_obs(run.obs_spec, (batch,))
    state = agent.initial_state(batch)
    action = torch.zeros(batch, dtype=torch.long)
    reward, done = torch.zeros(batch), torch.zeros(batch, dtype=torch.bool)

    def call() -> int:
        agent.act(obs, action, reward, done, state)
        return batch

    return _per_core_rate(call, seconds)


def learner_rate(run: Any, seconds: float) -> float:
    """Learner samples (agent steps) per core-second on a batch of the run's shape."""
    t, b = run.unroll_length, run.batch_size
    spec = run.obs_spec
    batch: dict[str, torch.Tensor] = {
        **_fake_obs(spec, (t + 1, b)),
        "action": torch.randint(0, spec.num_actions, (t + 1, b)),
        "policy_logits": torch.randn(t + 1, b, spec.num_actions),
        "reward": torch.randn(t + 1, b),
        "terminated": torch.rand(t + 1, b) < 0.01,
        "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
        "truncation_value": torch.zeros(t + 1, b),
    }
    if run.config.model.use_lstm:
        batch["state_h"], batch["state_c"] = run.agent.initial_state(b)
    batch = {k: v.to(run.device) for k, v in batch.items()}

    def call() -> int:
        run.learner.step(batch, 1e-6)
        return t * b

    return _per_core_rate(call, seconds)


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Per-core rates of env, inference and learner for `config`'s run.

    Each part is measured `rounds` times, interleaved, for `seconds / rounds` each, and its
    best round is kept: interference (another process, the host of a VM) only ever slows a
    part down, so the best round is the closest to what the core can do, and a limit built
    from it is the strictest one for the efficiency.
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
        rates = {name: 0.0 for name in parts}
        for _ in range(max(1, rounds)):
            for name, measure in parts.items():
                rates[name] = max(rates[name], measure(seconds / max(1, rounds)))
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
