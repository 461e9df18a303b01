"""Env throughput as the actors see it (`gazelle bench env`).

An actor steps its envs one after the other in its own process (`SerialEnvs`); training
scales by running more actor processes. This measures, in this process and with random
actions, (1) one bare env (`env.step`, reset when an episode ends) and (2) a `SerialEnvs`
batch of `--envs` envs (default 32). For each: env steps per second of wall time and per
CPU-second of this process and its children (ViZDoom's engine runs in one; CPU time barely
depends on what else the machine runs), and the
same in frames (steps x action repeats: 4 on Atari). Prints a small table, then one JSON
line::

    gazelle bench env --env ALE/Pong-v5 --envs 32 --seconds 10
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym

from gazelle.envs.batch import SerialEnvs
from gazelle.runtime.part_costs import cpu_seconds

#: Distinct random actions drawn up front and cycled, so drawing costs nothing per step.
_ACTION_TABLE = 512

#: Calls before the clock starts: the first steps touch fresh pages and caches.
_WARMUP = 5


def make_env(spec: str) -> gym.Env:
    """`gazelle.envs.make(spec)`, imported when called."""
    from gazelle.envs import make

    return make(spec)


def _timed(step: Callable[[int], Any], steps_per_call: int, seconds: float) -> tuple[float, float]:
    """Call `step(k)` for k = 0, 1, ... during `seconds` of wall time, after a warm-up.

    Returns:
        (env steps per wall second, env steps per CPU-second of this process and its
        children).
    """
    for k in range(_WARMUP):
        step(k)
    calls = 0
    cpu_start, start = cpu_seconds(), time.perf_counter()
    while (wall := time.perf_counter() - start) < seconds:
        step(calls)
        calls += 1
    cpu = cpu_seconds() - cpu_start
    steps = calls * steps_per_call
    return steps / wall, steps / cpu if cpu > 0 else float("nan")


def measure_env(env: gym.Env, seconds: float, seed: int = 0) -> tuple[float, float]:
    """(steps per wall second, steps per CPU-second) of one bare env, reset on every end."""
    env.action_space.seed(seed)
    # why: drawn before the clock starts, so the rate is the env's alone.
    actions = [env.action_space.sample() for _ in range(_ACTION_TABLE)]
    env.reset(seed=seed)

    def step(k: int) -> None:
        _, _, terminated, truncated, _ = env.step(actions[k % _ACTION_TABLE])
        if terminated or truncated:
            env.reset()

    return _timed(step, 1, seconds)


def measure_batch(envs: SerialEnvs, seconds: float, seed: int = 0) -> tuple[float, float]:
    """(env steps per wall second, env steps per CPU-second) of a batch: `N` per call."""
    import torch

    from gazelle.distributions import random_actions

    torch.manual_seed(seed)
    actions = random_actions(envs.obs_spec.actions, (_ACTION_TABLE, envs.num_envs)).numpy()
    envs.reset()
    return _timed(lambda k: envs.step(actions[k % _ACTION_TABLE]), envs.num_envs, seconds)


def _rates(prefix: str, per_s: float, per_cpu_s: float, repeats: int) -> dict[str, float]:
    return {
        f"{prefix}_steps_per_s": round(per_s, 1),
        f"{prefix}_steps_per_cpu_s": round(per_cpu_s, 1),
        f"{prefix}_frames_per_s": round(per_s * repeats, 1),
        f"{prefix}_frames_per_cpu_s": round(per_cpu_s * repeats, 1),
    }


def run(
    env_spec: str = "ALE/Pong-v5",
    seconds: float = 10.0,
    num_envs: int = 32,
    env_factory: Callable[[str], gym.Env] = make_env,
    action_repeats: int | None = None,
) -> dict[str, Any]:
    """Measure one bare env and a `SerialEnvs` batch of `num_envs`; return the numbers.

    Args:
        env_spec: what `env_factory` builds (a `gazelle.envs.make` spec by default).
        seconds: wall time of each of the two measurements.
        num_envs: envs in the batch (an actor's `--envs-per-actor`).
        env_factory: `spec -> env`.
        action_repeats: frames per env step; default `gazelle.envs.default_action_repeats`.

    Raises:
        ValueError: a bad argument, with the message naming its flag (`--env`, `--envs`,
            `--seconds`).
    """
    if not seconds > 0:
        raise ValueError(f"--seconds must be > 0, got {seconds:g}")
    if num_envs < 1:
        raise ValueError(f"--envs must be at least 1, got {num_envs}")
    try:
        env = env_factory(env_spec)
    except (ValueError, ImportError, gym.error.Error) as err:
        raise ValueError(f"--env: {err}") from None
    if action_repeats is None:
        from gazelle.envs import default_action_repeats

        action_repeats = default_action_repeats(env_spec)
    try:
        single = measure_env(env, seconds)
    finally:
        env.close()
    env_fns = [partial(env_factory, env_spec)] * num_envs
    with SerialEnvs(env_fns, seeds=range(num_envs)) as envs:
        batch = measure_batch(envs, seconds)
    return {
        "env": env_spec,
        "seconds": seconds,
        "action_repeats": action_repeats,
        "load_average": round(os.getloadavg()[0], 2),
        **_rates("single", *single, action_repeats),
        "num_envs": num_envs,
        **_rates("batch", *batch, action_repeats),
    }


def table(result: dict[str, Any]) -> str:
    """The measurements of `run` as a small text table."""
    lines = [
        f"env {result['env']}: {result['action_repeats']} frames per step,"
        f" {result['seconds']:g} s per row, load average {result['load_average']:.2f}",
        f"{'':22} {'envs':>5} {'steps/s':>11} {'steps/CPU-s':>12}"
        f" {'frames/s':>11} {'frames/CPU-s':>13}",
    ]
    rows = (("one env (env.step)", "single", 1), ("SerialEnvs", "batch", result["num_envs"]))
    for label, key, envs in rows:
        lines.append(
            f"{label:22} {envs:5d} {result[f'{key}_steps_per_s']:11,.0f}"
            f" {result[f'{key}_steps_per_cpu_s']:12,.0f}"
            f" {result[f'{key}_frames_per_s']:11,.0f} {result[f'{key}_frames_per_cpu_s']:13,.0f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the table, then the JSON line. A bad flag value exits 2 with one
    line naming the flag."""
    from gazelle.config.flags import OneLineParser, number_flag, text_flag

    parser = OneLineParser(prog="gazelle bench env", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--env", type=text_flag, default="ALE/Pong-v5", help="env spec (gazelle.envs.make)"
    )
    parser.add_argument(
        "--envs", type=number_flag(int, 1), default=32, help="envs in the SerialEnvs batch"
    )
    parser.add_argument(
        "--seconds", type=number_flag(float, above=0), default=10.0, help="wall time per row"
    )
    args = parser.parse_args(argv)
    try:
        result = run(args.env, args.seconds, args.envs)
    except ValueError as err:
        if not str(err).startswith("--"):
            raise
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print(table(result))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
