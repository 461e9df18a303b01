"""IMPALA's loop: batches from the backend, one learner step each, new weights published,
telemetry logged, checkpoints written. No maths here (the loss is `impala.loss`) and no
transport (the backend's `Transport`)."""

from __future__ import annotations

import dataclasses
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gazelle.algorithms.impala.build import ImpalaRun, build
from gazelle.algorithms.runstate import (
    CHECKPOINT_FILE,
    TrainResult,
    interruptible,
    restore,
    save,
    write_config,
)
from gazelle.algorithms.telemetry import Telemetry
from gazelle.backends.local.buffers import is_per_unroll
from gazelle.config import Config
from gazelle.logging import RunLogger, Timings
from gazelle.optim import polynomial_decay
from gazelle.runtime.layer_stats import StallWatch
from gazelle.runtime.learner import LossFn, Prefetcher

__all__ = ["CHECKPOINT_FILE", "NonFiniteError", "TrainResult", "train"]


def _drop_stale(batch: dict[str, torch.Tensor], version: int, max_lag: int | None) -> Any:
    """Drop unrolls whose policy is more than `max_lag` updates old (None keeps all)."""
    if max_lag is None:
        return batch
    keep = (version - batch["policy_version"]) <= max_lag
    if bool(keep.all()):
        return batch
    if not bool(keep.any()):
        return None
    index = keep.nonzero().squeeze(1)
    out = {}
    for name, value in batch.items():
        # why: time-major fields keep B in dim 1; per-unroll fields (state, meta) in dim 0.
        dim = 0 if is_per_unroll(name) else 1
        out[name] = value.index_select(dim, index.to(value.device))
    return out


def train(
    config: Config,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    *,
    loss_fn: LossFn | None = None,
) -> TrainResult:
    """Train IMPALA with `config`; resumes from its logdir's checkpoint if there is one.

    `on_progress` gets a dict at every log interval; `loss_fn` replaces the V-trace loss
    (see `build`)."""
    run = build(config, loss_fn)
    cfg = run.config
    logdir = Path(cfg.run.logdir)
    ckpt_path = logdir / CHECKPOINT_FILE
    counters = {"frames": 0, "updates": 0, "episodes": 0}
    if cfg.run.resume and ckpt_path.exists():
        counters = restore(ckpt_path, cfg, run.agent, run.optimizer, run.device)
        print(
            f"gazelle: resumed from {ckpt_path} at {counters['frames']:,} frames "
            f"({counters['updates']} updates)"
        )
    logger = RunLogger(
        logdir,
        total_frames=run.total_frames,
        resume_frames=counters["frames"] or None,
    )
    write_config(logdir, cfg)
    print(_describe(run))
    timings = Timings()
    telemetry = Telemetry(logger, timings, run.levels, run.action_repeats)
    telemetry.episodes = counters["episodes"]
    transport = run.transport
    transport.params.publish(run.agent, counters["updates"])
    transport.fleet.start()
    # why: twice the loop's own limit, so that the loop's message (naming each actor's
    # state) is what a user sees, not the batch source's bare timeout.
    timeout = 2 * cfg.run.batch_timeout_s
    prefetcher = Prefetcher(
        lambda should_stop: transport.batches.batches(run.batch_size, timeout, should_stop),
        run.device,
    )
    state = _LoopState(counters["frames"], counters["updates"])
    interrupted = False
    try:
        with interruptible():
            _loop(run, state, prefetcher, logger, timings, telemetry, on_progress)
    except KeyboardInterrupt:
        interrupted = True
        print("\ngazelle: interrupted; saving a checkpoint (re-run the same command to resume)")
    finally:
        prefetcher.close()
        transport.fleet.close()
        # why: the events actors sent while the loop ended still carry finished episodes.
        telemetry.consume(transport.fleet.poll(), state.frames)
        save(
            ckpt_path,
            cfg,
            run.agent,
            run.optimizer,
            state.frames,
            state.updates,
            telemetry.episodes,
            run.levels,
        )
        fps = state.fps()
        logger.progress(state.frames, fps, {k: float(v) for k, v in state.metrics.items()})
        logger.console_line(state.frames, fps, force=True)
        logger.close()
    return TrainResult(
        frames=state.frames,
        updates=state.updates,
        episodes=telemetry.episodes,
        recent_return=logger.recent_return(),
        level_returns={level: logger.recent_return(level) for level in run.levels},
        fps=state.fps(),
        logdir=logdir,
        interrupted=interrupted,
        actor_restarts=sum(transport.fleet.restarts),
        dropped_unrolls=transport.fleet.dropped_slots + state.stale_unrolls,
    )


@dataclasses.dataclass
class _LoopState:
    frames: int
    updates: int
    stale_unrolls: int = 0
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_time: float = dataclasses.field(default_factory=time.monotonic)
    start_frames: int = 0

    def __post_init__(self) -> None:
        self.start_frames = self.frames

    def fps(self) -> float:
        return (self.frames - self.start_frames) / max(time.monotonic() - self.start_time, 1e-9)


def _loop(
    run: ImpalaRun,
    state: _LoopState,
    prefetcher: Prefetcher,
    logger: RunLogger,
    timings: Timings,
    telemetry: Telemetry,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    cfg, transport = run.config, run.transport
    frames_per_unroll = run.unroll_length * run.action_repeats
    ckpt_path = Path(cfg.run.logdir) / CHECKPOINT_FILE
    stall = StallWatch()
    inference_seen = {"batches": 0.0, "rows": 0.0}
    deadline = state.start_time + (cfg.run.max_seconds or float("inf"))
    last_log = last_ckpt = time.monotonic()
    while state.frames < run.total_frames and time.monotonic() < deadline:
        t0 = time.perf_counter()
        batch = _next_batch(prefetcher, run)
        t1 = time.perf_counter()
        timings.add("learner_wait", t1 - t0)
        lag = state.updates - batch["policy_version"]
        kept = _drop_stale(batch, state.updates, cfg.impala.max_policy_lag)
        state.stale_unrolls += int(lag.numel()) - (
            0 if kept is None else int(kept["policy_version"].numel())
        )
        telemetry.consume(transport.fleet.poll(), state.frames)
        if kept is None:
            continue
        lr = polynomial_decay(run.learning_rate, state.frames, run.total_frames)
        metrics = run.learner.step(kept, lr)
        state.frames += frames_per_unroll * int(kept["policy_version"].numel())
        if metrics["learner/skipped"]:
            _nonfinite(run, state.frames)
        else:
            state.updates += 1
            transport.params.publish(run.agent, state.updates)
        timings.add("learner", time.perf_counter() - t1)
        stall.update(metrics, state.updates)
        state.metrics = {
            **metrics,
            "charts/learning_rate": lr,
            "charts/policy_lag": lag.float().mean(),
            "charts/policy_lag_max": lag.max(),
            "charts/stale_unrolls": state.stale_unrolls,
            "charts/actor_restarts": telemetry.restarts,
            "charts/skipped_updates": run.learner.skipped,
            "charts/env_errors": telemetry.env_errors,
            "charts/actors_hung": telemetry.hung,
            **_inference_metrics(transport.fleet.stats(), inference_seen),
        }
        now = time.monotonic()
        if now - last_log >= cfg.run.log_interval_s:
            _log(run, state, logger, timings, telemetry, on_progress)
            last_log = now
        if now - last_ckpt >= cfg.run.checkpoint_interval_s:
            save(
                ckpt_path,
                cfg,
                run.agent,
                run.optimizer,
                state.frames,
                state.updates,
                telemetry.episodes,
                run.levels,
            )
            last_ckpt = now


class NonFiniteError(RuntimeError):
    """Too many updates in a row had a non-finite loss or gradient."""


def _nonfinite(run: ImpalaRun, frames: int) -> None:
    """Report a skipped update; stop the run after `--max-nonfinite-updates` in a row."""
    learner, limit = run.learner, run.config.run.max_nonfinite_updates
    print(
        f"\ngazelle: warning: non-finite loss or gradient at {frames:,} frames; update "
        f"skipped ({learner.skipped_in_a_row} in a row, {learner.skipped} in all), weights "
        "and optimiser state unchanged"
    )
    if learner.skipped_in_a_row >= limit:
        raise NonFiniteError(
            f"{learner.skipped_in_a_row} updates in a row had a non-finite loss or gradient "
            f"(--max-nonfinite-updates {limit}); stopping. The checkpoint keeps the last "
            "good weights; try a lower --learning-rate, --grad-norm-clip, or check the env's "
            "rewards and observations"
        )


def _next_batch(prefetcher: Prefetcher, run: ImpalaRun) -> dict[str, torch.Tensor]:
    """The next batch. Raises if a part the run needs died, or after `--batch-timeout-s`
    without one (naming each actor's state; a warning with it comes at a quarter)."""
    timeout = run.config.run.batch_timeout_s
    start = time.monotonic()
    warned = False
    while True:
        # why: short waits, so a dead inference server (no more unrolls) fails the run
        # with its own error instead of a learner timeout much later.
        run.transport.fleet.check()
        try:
            return prefetcher.get(timeout=max(0.01, min(1.0, timeout)))
        except queue.Empty:
            waited = time.monotonic() - start
            if waited >= timeout:
                raise TimeoutError(
                    f"the learner got no batch for {waited:.0f} s (--batch-timeout-s); "
                    f"actors:\n{run.transport.fleet.describe()}"
                ) from None
            if not warned and waited >= timeout / 4:
                warned = True
                print(
                    f"\ngazelle: warning: no batch for {waited:.0f} s; actors:\n"
                    f"{run.transport.fleet.describe()}"
                )


def _inference_metrics(stats: dict[str, float], seen: dict[str, float]) -> dict[str, float]:
    """Mean envs per central inference batch since the last call (`seen` is updated)."""
    batches = stats.get("batches", 0.0) - seen["batches"]
    if batches <= 0:
        return {}
    mean = (stats["rows"] - seen["rows"]) / batches
    seen.update(batches=stats["batches"], rows=stats["rows"])
    return {"charts/inference_batch": mean}


def _log(
    run: ImpalaRun,
    state: _LoopState,
    logger: RunLogger,
    timings: Timings,
    telemetry: Telemetry,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    fps = state.fps()
    scalars = {**{k: float(v) for k, v in state.metrics.items()}, "charts/fps": fps}
    scalars.update(timings.means())
    scalars.update(_scores(run, logger))
    logger.scalars(scalars, state.frames)
    counts = telemetry.take_action_counts()
    if counts is not None:
        logger.histogram("charts/action", np.repeat(np.arange(len(counts)), counts), state.frames)
    logger.progress(state.frames, fps, scalars)
    logger.console_line(state.frames, fps)
    timings.reset()
    if on_progress is not None:
        on_progress(
            {
                "frames": state.frames,
                "fps": fps,
                "time": time.monotonic(),
                "updates": state.updates,
                "episode_return": logger.recent_return(),
                **{k: v for k, v in scalars.items() if k.startswith("timing/")},
            }
        )


def _scores(run: ImpalaRun, logger: RunLogger) -> dict[str, float]:
    """Human-normalised scores over the levels' recent returns (Atari / DMLab-30), when
    every level is in a score table and has returns; {} otherwise."""
    from gazelle.envs import scores

    returns = {level: list(values) for level, values in logger.level_returns().items()}
    if len(returns) < len(run.levels) or not all(returns.values()):
        return {}
    try:
        no_cap = scores.compute_human_normalized_score(returns, per_level_cap=None)
        cap = scores.compute_human_normalized_score(returns, per_level_cap=100)
    except (KeyError, ValueError):
        return {}
    return {"scores/human_normalized_no_cap": no_cap, "scores/human_normalized_cap_100": cap}


def _describe(run: ImpalaRun) -> str:
    """The first log line: what runs, with every resolved choice a user did not make."""
    cfg = run.config
    env = cfg.env
    atari = ""
    if run.probe.kind == "atari":
        atari = f" sticky_actions={env.sticky_actions} life_loss={env.life_loss}"
    return (
        f"gazelle: impala on {env.id}{atari}: model={cfg.model.torso} "
        f"actors={cfg.actors.num_actors}x{cfg.actors.envs_per_actor} envs "
        f"inference={cfg.actors.inference} device={run.device} B={run.batch_size} "
        f"T={run.unroll_length} optimizer={cfg.impala.optimizer} lr={run.learning_rate:g} "
        f"eps={cfg.impala.epsilon:g} entropy={cfg.impala.entropy_cost:g} "
        f"preset={cfg.impala.preset} total_frames={run.total_frames:,}"
    )
