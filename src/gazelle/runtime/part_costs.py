"""What each part of a run costs on one core: env steps, the actors' inference, the learner.

Each rate is items per CPU-second of this process on one torch thread (and of its child
processes: a ViZDoom env runs its engine in one), so the rates of parts measured one after
another add up to the machine's limit. Two users: the layout rule, which
gives the actors their share of the cores from these costs at start-up
(`gazelle.algorithms.layout`), and `gazelle bench`, which compares a real run with the
limit they set (`gazelle.bench.parts`).

`inference_rate` builds its own agent from a config's model section; `learner_rate` steps
the `Learner` it is handed (the algorithm builds it: the layout rule knows no learner).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch

from gazelle.distributions import random_actions


def children_cpu_seconds() -> float:
    """CPU seconds used so far by the live child processes of this one (Linux `/proc`; 0
    elsewhere): ViZDoom's engine runs in a child of the process that steps the env."""
    if not os.path.isdir("/proc"):
        return 0.0
    me, ticks, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # why: the command name (2nd field) may hold spaces; fields after it split.
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == me:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def cpu_seconds() -> float:
    """CPU seconds of this process and its live children (see `children_cpu_seconds`)."""
    return time.process_time() + children_cpu_seconds()


def per_core_rate(fn: Callable[[], int], seconds: float) -> float:
    """Items per CPU-second of this process and its children (one thread), calling fn until
    `seconds` pass."""
    fn()  # warm up (allocations, lazy init)
    items, cpu0, wall0 = 0, cpu_seconds(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        items += fn()
    return items / max(cpu_seconds() - cpu0, 1e-9)


def best_rates(
    parts: dict[str, Callable[[float], float]],
    seconds: float,
    rounds: int = 3,
    settled: Callable[[dict[str, float]], bool] | None = None,
) -> dict[str, float]:
    """Each part's best rate over `rounds` interleaved rounds of `seconds / rounds` each,
    or over fewer where `settled(rates)` says, after a round, that the best rates so far
    already decide what they are measured for (the rounds left could only raise them).

    `parts` maps a name to a measurement (seconds -> rate, such as `env_rate` bound to its
    arguments). Interference (another process, the host of a VM, a part's own warm-up) only
    ever slows a part down, so its best round is the closest to what the core can do; why
    interleaved: a burst of interference then slows one round of each part, not every round
    of one part.
    """
    rounds = max(1, rounds)
    rates = {name: 0.0 for name in parts}
    for done in range(1, rounds + 1):
        for name, measure in parts.items():
            rates[name] = max(rates[name], measure(seconds / rounds))
        if done < rounds and settled is not None and settled(dict(rates)):
            break
    return rates


def env_rate(make_env: Callable[[], Any], seconds: float) -> float:
    """Agent steps per core-second, random actions, of the env `make_env()` makes (the run's
    `EnvProbe.make`, so the level is not resolved again)."""
    env = make_env()
    env.reset(seed=0)
    env.action_space.seed(0)
    # why: drawn before the clock starts, so the rate is the env's alone.
    actions = [env.action_space.sample() for _ in range(100)]

    def steps() -> int:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return 100

    try:
        return per_core_rate(steps, seconds)
    finally:
        env.close()


def fake_obs(spec: Any, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Random observations of `spec` (an `ObsSpec`) with leading dims `shape`."""
    from gazelle.models.encoders import random_obs

    return random_obs(spec, shape)


def inference_rate(config: Any, obs_spec: Any, batch: int, seconds: float) -> float:
    """`Agent.act` samples per core-second at `batch` envs, on an agent of `config`'s model
    section (a `gazelle.config.Config`) for observations `obs_spec`."""
    from gazelle.models import build_agent

    model = config.model
    agent = build_agent(obs_spec, model.torso, model.use_lstm, **model.agent_options()).eval()
    obs = fake_obs(obs_spec, (batch,))
    state = agent.initial_state(batch)
    action = torch.from_numpy(obs_spec.actions.zeros(batch))
    reward, done = torch.zeros(batch), torch.zeros(batch, dtype=torch.bool)

    def call() -> int:
        agent.act(obs, action, reward, done, state)
        return batch

    return per_core_rate(call, seconds)


def learner_rate(
    learner: Any, obs_spec: Any, unroll_length: int, batch_size: int, seconds: float
) -> float:
    """Learner samples (agent steps) per core-second of `learner` (a `Learner`) on a batch
    of `[unroll_length + 1, batch_size]` steps of `obs_spec`."""
    t, b = unroll_length, batch_size
    spec = obs_spec
    batch: dict[str, torch.Tensor] = {
        **fake_obs(spec, (t + 1, b)),
        "action": random_actions(spec.actions, (t + 1, b)),
        "policy_logits": torch.randn(t + 1, b, spec.actions.num_params),
        "reward": torch.randn(t + 1, b),
        "terminated": torch.rand(t + 1, b) < 0.01,
        "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
        "truncation_value": torch.zeros(t + 1, b),
    }
    state = learner.agent.initial_state(b)
    if state:  # why: () without an LSTM core
        batch["state_h"], batch["state_c"] = state
    batch = {k: v.to(learner.device) for k, v in batch.items()}

    def call() -> int:
        learner.step(batch, 1e-6)
        return t * b

    return per_core_rate(call, seconds)
