"""`gazelle bench` (train): how close real training runs to what this machine can do.

In one invocation, on one machine:

1. each part alone, on one core (one torch thread, CPU time measured):
   - env: agent steps/s with random actions and the run's preprocessing;
   - inference: `Agent.act` samples/s at the batch the run's actors use (envs per actor);
   - learner: samples/s of `Learner.step` (the real IMPALA loss and optimiser) on a
     `[T+1, B]` batch of the run's shape and precision;
2. real training (`gazelle.algorithms.impala.train`) for a fixed wall time with that config.

The machine's limit is `cores / (env + inference + learner core-seconds per agent step)`
agent steps/s (times action repeats for frames/s), and the efficiency is the training
frames/s over that limit. Frames are env frames (4 per agent step on Atari).

It takes only the flags listed below (not every flag of `gazelle train`); every other
setting (--preset, --slots-per-env, --lockstep, ...) is what `gazelle train` would choose
for the env. APPO is not benched yet: its learner part would be measured as one V-trace
pass per batch, not its clipped loss over --epochs passes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from gazelle.algorithms import runlock
from gazelle.bench.parts import limit, measure_parts
from gazelle.config import Config, algorithm_fields, registry, validate

#: The algorithms whose parts `gazelle bench` measures as they train.
BENCHED = ("impala", "a3c")
NUM_ACTORS_HELP = """default: as gazelle train chooses it: IMPALA with a CPU learner measures
what an agent step costs in acting and in learning at start-up and gives the actors their
share of the cores; otherwise (A3C, a GPU, --backend ray) every core but one, at least 2"""
WARMUP_FRACTION = 0.25
#: A learner busy at least this fraction of its time limits the run; below, the actors do.
BUSY_BOUND = 0.9


def learner_busy(points: list[dict[str, Any]]) -> float | None:
    """Fraction of the learner loop's time spent in updates (not waiting for a batch)."""
    step = [p["timing/learner"] for p in points if "timing/learner" in p]
    wait = [p["timing/learner_wait"] for p in points if "timing/learner_wait" in p]
    if not step or not wait:
        return None
    return float(np.mean(step) / max(np.mean(step) + np.mean(wait), 1e-12))


def run(
    config: Config,
    seconds: float = 60.0,
    part_seconds: float = 4.5,
    cores: int | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Measure parts, then train for `seconds`; returns the JSON-able result."""

    cores = cores or os.cpu_count() or 1
    # why: the parts are measured on a run that writes nothing; its logdir is a throwaway
    with tempfile.TemporaryDirectory(prefix="gazelle-bench-parts-") as scratch:
        # the algorithm's (`Algorithm.measure_parts`)
        parts = measure_parts(config.replace(logdir=scratch), part_seconds)
        runlock.release(scratch)  # why: taken by the parts' preflight; the run is over
    resolved: Config = parts["config"]
    # why: train with the actors the parts' build chose (a layout left unset is measured
    # at start-up, and a second measurement could choose differently from the one reported)
    config = config.replace(num_actors=resolved.actors.num_actors)
    fps, points = train_fps(config, seconds)
    limit_fps = limit(parts["rates"], cores, parts["action_repeats"])
    env_limit = cores * parts["rates"]["env_steps_per_core_s"] * parts["action_repeats"]
    busy = learner_busy(points)
    out = {
        "fps": round(fps, 1),
        "limit_fps": round(limit_fps, 1),
        "efficiency": round(fps / limit_fps, 3),
        # why: with a GPU the learner (and central inference) take no CPU core, so the
        # machine's limit is the envs on every core: the figure a GPU run is judged by.
        "env_limit_fps": round(env_limit, 1),
        "env_efficiency": round(fps / env_limit, 3),
        "learner_busy": None if busy is None else round(busy, 3),
        "bound": None if busy is None else ("learner" if busy >= BUSY_BOUND else "actors"),
        **{k: round(v, 1) for k, v in parts["rates"].items()},
        "inference_batch": parts["inference_batch"],
        "cores": cores,
        "seconds": seconds,
        "config": {k: _get(resolved, k) for k in CONFIG_KEYS},
    }
    if config.actors.backend != registry.DEFAULT_BACKEND:
        # why: the backend's cost is the ratio to the local backend on the same config, in
        # the same invocation (same machine, same minute), as docs/performance.md asks.
        # why: the flags only that backend reads go back to their defaults (the local
        # backend refuses them).
        defaults = type(config.actors)()
        own = registry.backend(config.actors.backend).own_flags
        local = config.replace(
            backend=registry.DEFAULT_BACKEND, **{f: getattr(defaults, f) for f in own}
        )
        local_fps, _ = train_fps(local, seconds)
        transport = [p["ray/get_ms_per_unroll"] for p in points if "ray/get_ms_per_unroll" in p]
        out.update(
            backend=config.actors.backend,
            local_fps=round(local_fps, 1),
            backend_over_local=round(fps / max(local_fps, 1e-9), 3),
            get_ms_per_unroll=round(transport[-1], 3) if transport else None,
        )
    if verbose:
        print(table(out))
        print(json.dumps(out))
    return out


def train_fps(config: Config, seconds: float) -> tuple[float, list[dict[str, Any]]]:
    """Train `config` for `seconds`; its steady-state frames/s and its progress points."""
    from gazelle.algorithms import train

    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gazelle-bench-") as logdir:
        bench_config = config.replace(
            logdir=logdir,
            max_seconds=seconds,
            total_frames=10**12,
            log_interval_s=max(1.0, seconds / 20),
            checkpoint_interval_s=10**9,
            resume=False,
        )
        result = train(bench_config, on_progress=points.append)
    # why: leave out the start (process spawn, imports, first batches) and measure the
    # steady state: frames between the first progress point after the warm-up and the last.
    start = (
        next(
            (p for p in points if p["time"] - points[0]["time"] >= WARMUP_FRACTION * seconds),
            points[0],
        )
        if points
        else None
    )
    end = points[-1] if points else None
    if start is not None and end is not None and end["time"] > start["time"]:
        fps = (end["frames"] - start["frames"]) / (end["time"] - start["time"])
    else:
        fps = result.fps
    return fps, [p for p in points if start is None or p["time"] >= start["time"]]


CONFIG_KEYS = (
    "algo",
    "env",
    "model",
    "use_lstm",
    "core_input_norm",
    "num_actors",
    "envs_per_actor",
    "batch_size",
    "unroll_length",
    "inference",
    "env_groups",
    "precision",
    "learner_threads",
    "device",
    "backend",
)


def _get(config: Config, name: str) -> Any:
    """A flat setting of `config`, or None where its algorithm has no such setting."""
    from gazelle.config import ConfigError

    try:
        return config.get(name)
    except ConfigError:
        return None


def table(out: dict[str, Any]) -> str:
    cfg = out["config"]
    lines = [
        "gazelle bench: " + " ".join(f"{k}={v}" for k, v in cfg.items()),
        f"  env        {out['env_steps_per_core_s']:>10,.0f} agent steps / core-second",
        f"  inference  {out['inference_samples_per_core_s']:>10,.0f} samples / core-second "
        f"(batch {out['inference_batch']})",
        f"  learner    {out['learner_samples_per_core_s']:>10,.0f} samples / core-second",
        f"  limit      {out['limit_fps']:>10,.0f} frames/s on {out['cores']} cores",
        f"  training   {out['fps']:>10,.0f} frames/s (steady state of {out['seconds']:.0f} s)",
        f"  efficiency {out['efficiency']:>10.2f}",
        f"  env-bound  {out['env_limit_fps']:>10,.0f} frames/s (every core stepping envs only; "
        f"{out['env_efficiency']:.2f} of it)",
    ]
    if "backend_over_local" in out:
        lines.append(
            f"  local      {out['local_fps']:>10,.0f} frames/s (same config, --backend local)"
        )
        lines.append(
            f"  {out['backend']}/local  {out['backend_over_local']:>8.2f} (transport: "
            f"{out['get_ms_per_unroll']} ms of ray.get per env's unroll on the learner)"
        )
    if out["learner_busy"] is not None:
        lines.append(
            f"  bound      {out['bound']:>10} (learner busy {out['learner_busy']:.0%} of the time)"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The flags of `gazelle bench [train]` (also rendered into docs/cli.md)."""
    from gazelle.config.flags import OneLineParser, number_flag, text_flag

    count = number_flag(int, 1)
    parser = OneLineParser(
        prog="gazelle bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--algo", type=text_flag, default="impala", help=f"{' | '.join(BENCHED)} (not appo yet)"
    )
    parser.add_argument("--env", type=text_flag, default="ALE/Pong-v5")
    parser.add_argument(
        "--model", type=text_flag, default=None, help="default: shallow (impala), universe (a3c)"
    )
    parser.add_argument(
        "--use-lstm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="default: the env family's preset (off for Atari)",
    )
    parser.add_argument(
        "--core-input-norm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a layer norm on the LSTM core's input (default: the preset's)",
    )
    parser.add_argument("--num-actors", type=count, default=None, help=NUM_ACTORS_HELP)
    parser.add_argument("--envs-per-actor", type=count, default=None)
    parser.add_argument("--batch-size", type=count, default=None)
    parser.add_argument("--unroll-length", type=count, default=None)
    parser.add_argument(
        "--inference", type=text_flag, default="auto", help="auto | local | central"
    )
    parser.add_argument(
        "--env-groups",
        type=count,
        default=None,
        help="central inference: env groups per actor (default: gazelle train's)",
    )
    parser.add_argument("--precision", type=text_flag, default="fp32")
    parser.add_argument("--learner-threads", type=count, default=None)
    parser.add_argument(
        "--device", type=text_flag, default="auto", help="auto | cpu | cuda | cuda:N"
    )
    parser.add_argument(
        "--backend",
        type=text_flag,
        default="local",
        help="local | ray (ray: also trains with local, and prints the ratio)",
    )
    parser.add_argument(
        "--ray-address", type=text_flag, default=None, help="ray: the cluster to join"
    )
    parser.add_argument(
        "--seconds", type=number_flag(float, above=0), default=60.0, help="training wall time"
    )
    parser.add_argument(
        "--part-seconds",
        type=number_flag(float, above=0),
        default=4.5,
        help="seconds to measure each part alone (in 3 interleaved rounds; the best counts)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    from gazelle.algorithms.common import probe

    args = build_parser().parse_args(argv)
    if args.algo not in BENCHED:
        from gazelle.config import ConfigError

        raise ConfigError(
            "algo",
            args.algo,
            f"{' | '.join(BENCHED)} (not appo yet: its learner part would be measured as "
            "IMPALA's, not its own loss and passes)",
        )
    values = dict(
        algo=args.algo,
        env=args.env,
        # why: the algorithm's torso for images (A3C: universe), else the CPU's (shallow).
        model=args.model or registry.algorithm(args.algo).image_torso or "shallow",
        use_lstm=args.use_lstm,
        core_input_norm=args.core_input_norm,
        num_actors=args.num_actors,
        envs_per_actor=args.envs_per_actor,
        unroll_length=args.unroll_length,
        precision=args.precision,
        learner_threads=args.learner_threads,
        device=args.device,
        backend=args.backend,
        ray_address=args.ray_address,
    )
    if "batch_size" in algorithm_fields(args.algo):  # a learner fed batches by actors
        values.update(
            batch_size=args.batch_size, inference=args.inference, env_groups=args.env_groups
        )
    # why: flags left out keep the config's default (for A3C, fields are not optional)
    config = Config.from_flat({k: v for k, v in values.items() if v is not None})
    # why: every bad flag (an env that cannot be made too) is one line before anything is
    # measured
    validate(config)
    probe(config)
    run(config, seconds=args.seconds, part_seconds=args.part_seconds)
