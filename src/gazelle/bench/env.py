"""Env throughput: one process against the worker pool (`gazelle bench env`).

Measures env steps per second, and frames per second (steps x action repeats: 4 on Atari),
of random actions for (1) `SerialEnvs` with one env in this process and (2) a `VectorEnv`
with one worker per core and several envs per worker. Prints both, then one JSON line::

    python -m gazelle.bench.env --env ALE/Pong-v5 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from gazelle.envs.vector import SerialEnvs, VectorEnv

#: Distinct random actions drawn up front and cycled, so drawing costs nothing per step.
_ACTION_TABLE = 512


def make_env(spec: str) -> gym.Env:
    """`gazelle.envs.make(spec)`, imported when called (module-level: picklable)."""
    from gazelle.envs import make

    return make(spec)


def _cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time (user + system) of this process and of `pids` (Linux /proc; else NaN)."""
    total = time.process_time()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        # why: utime and stime are fields 14 and 15 of /proc/<pid>/stat (index 11, 12
        # after the command name), in clock ticks.
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(envs: SerialEnvs | VectorEnv, seconds: float, seed: int = 0) -> tuple[float, float]:
    """(env steps per second, CPU microseconds per env step) of the batch over `seconds`.

    The CPU cost counts this process and the workers: unlike the rate, it barely depends
    on what else the machine runs, so it shows the pool's overhead on a busy machine.
    """
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, envs.obs_spec.num_actions, size=(_ACTION_TABLE, envs.num_envs))
    pids = envs.worker_pids if isinstance(envs, VectorEnv) else []
    envs.reset()
    for k in range(5):  # warm-up: first steps touch fresh pages and caches
        envs.step(actions[k])
    calls = 0
    cpu_start, start = _cpu_seconds(pids), time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        envs.step(actions[calls % _ACTION_TABLE])
        calls += 1
    steps = calls * envs.num_envs
    return steps / elapsed, (_cpu_seconds(pids) - cpu_start) / steps * 1e6


def run(
    env_spec: str = "ALE/Pong-v5",
    seconds: float = 10.0,
    num_workers: int | None = None,
    envs_per_worker: int = 4,
    env_factory: Callable[[str], gym.Env] = make_env,
    action_repeats: int | None = None,
) -> dict[str, Any]:
    """Measure one process and the pool; return the numbers as a dict.

    Args:
        env_spec: what `env_factory` builds (a `gazelle.envs.make` spec by default).
        seconds: duration of each of the two measurements.
        num_workers: worker processes of the pool; default `os.cpu_count()`.
        envs_per_worker: envs each worker steps in turn.
        env_factory: picklable `spec -> env` (called in the workers).
        action_repeats: frames per env step; default `gazelle.envs.default_action_repeats`.
    """
    if action_repeats is None:
        from gazelle.envs import default_action_repeats

        action_repeats = default_action_repeats(env_spec)
    env_fn = partial(env_factory, env_spec)
    with SerialEnvs([env_fn], seeds=[0]) as serial:
        serial_sps, serial_cpu = measure(serial, seconds)
    workers = num_workers or os.cpu_count() or 1
    num_envs = workers * envs_per_worker
    with VectorEnv([env_fn] * num_envs, num_workers=workers, seeds=range(num_envs)) as pool:
        pool_sps, pool_cpu = measure(pool, seconds)
    return {
        "env": env_spec,
        "seconds": seconds,
        "cpu_count": os.cpu_count(),
        "action_repeats": action_repeats,
        "serial_steps_per_s": round(serial_sps, 1),
        "serial_frames_per_s": round(serial_sps * action_repeats, 1),
        "serial_cpu_us_per_step": round(serial_cpu, 1),
        "num_workers": workers,
        "num_envs": num_envs,
        "pool_steps_per_s": round(pool_sps, 1),
        "pool_frames_per_s": round(pool_sps * action_repeats, 1),
        "pool_cpu_us_per_step": round(pool_cpu, 1),
        "speedup": round(pool_sps / serial_sps, 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: print the two measurements, then the JSON line."""
    parser = argparse.ArgumentParser(prog="gazelle bench env", description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5", help="env spec (gazelle.envs.make)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--num-workers", type=int, default=None, help="default: cpu count")
    parser.add_argument("--envs-per-worker", type=int, default=4)
    args = parser.parse_args(argv)
    result = run(args.env, args.seconds, args.num_workers, args.envs_per_worker)
    print(f"env {result['env']}: {result['action_repeats']} frames per step")
    print(
        f"  one process (SerialEnvs, 1 env): {result['serial_steps_per_s']:10.1f} steps/s"
        f" {result['serial_frames_per_s']:10.1f} frames/s"
        f" {result['serial_cpu_us_per_step']:8.1f} CPU us/step"
    )
    print(
        f"  pool (VectorEnv, {result['num_workers']} workers x {args.envs_per_worker} envs):"
        f" {result['pool_steps_per_s']:10.1f} steps/s {result['pool_frames_per_s']:10.1f}"
        f" frames/s {result['pool_cpu_us_per_step']:8.1f} CPU us/step ({result['speedup']:.2f}x)"
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
