"""IMPALA's loop's reporting: progress rows and TensorBoard scalars, the first log line,
the human-normalised scores, and what a non-finite update says."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gazelle.algorithms import stops
from gazelle.algorithms.common import model_words
from gazelle.algorithms.impala.build import ImpalaRun
from gazelle.algorithms.telemetry import Telemetry
from gazelle.logging import RunLogger, Timings


def report_nonfinite(run: ImpalaRun, frames: int) -> None:
    """Report a skipped update; stop the run after `--max-nonfinite-updates` in a row (the
    same words and limit as A3C's workers: `gazelle.algorithms.stops`)."""
    learner = run.learner
    stops.report_nonfinite(
        learner.skipped_in_a_row, learner.skipped, run.config.run.max_nonfinite_updates, frames
    )


def inference_metrics(stats: dict[str, float], seen: dict[str, float]) -> dict[str, float]:
    """Mean envs per central inference batch since the last call (`seen` is updated), and
    the backend's own metrics as they are (names with a `/`, e.g. `ray/get_ms_per_unroll`)."""
    out = {name: float(value) for name, value in stats.items() if "/" in name}
    batches = stats.get("batches", 0.0) - seen["batches"]
    if batches <= 0:
        return out
    mean = (stats["rows"] - seen["rows"]) / batches
    seen.update(batches=stats["batches"], rows=stats["rows"])
    return {**out, "charts/inference_batch": mean}


def log_progress(
    run: ImpalaRun,
    state: Any,
    logger: RunLogger,
    timings: Timings,
    telemetry: Telemetry,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> dict[str, float]:
    """Writes one progress row (TensorBoard, progress.jsonl, console); returns its scalars."""
    fps = state.fps()
    scalars = {**{k: float(v) for k, v in state.metrics.items()}, "charts/fps": fps}
    scalars.update(timings.means())
    scalars.update(telemetry.scores())
    scalars.update(telemetry.level_metrics())
    logger.scalars(scalars, state.frames)
    counts = telemetry.take_action_counts()
    if counts is not None:
        logger.histogram("charts/action", np.repeat(np.arange(len(counts)), counts), state.frames)
    logger.progress(state.frames, fps, scalars)
    logger.console_line(state.frames, fps, **console_extras(state, telemetry))
    timings.reset()
    if on_progress is not None:
        on_progress(
            {
                "frames": state.frames,
                "fps": fps,
                "time": time.monotonic(),
                "updates": state.updates,
                "episode_return": logger.recent_return(),
                **{k: v for k, v in scalars.items() if k.startswith(("timing/", "ray/"))},
            }
        )
    return scalars


def console_extras(state: Any, telemetry: Telemetry) -> dict[str, Any]:
    """What the console shows beyond frames and returns: the policy lag of the last batch
    (None before the first update) and the actor restarts so far."""
    lag = state.metrics.get("charts/policy_lag")
    return {
        "policy_lag": None if lag is None else float(lag),
        "actor_restarts": telemetry.restarts,
    }


def describe(run: ImpalaRun) -> str:
    """The first log line: what runs, with every resolved choice a user did not make."""
    cfg = run.config
    env = cfg.env
    atari = ""
    if run.probe.kind == "atari":
        atari = f" sticky_actions={env.sticky_actions} life_loss={env.life_loss}"
    epochs, minibatches = run.passes
    appo = ""
    section = cfg.algorithm
    if getattr(section, "clip_ratio", None) is not None:  # APPO's: its passes and clip
        appo = (
            f"epochs={epochs} minibatches={minibatches} clip={section.clip_ratio:g} "
            f"lambda={section.vtrace_lambda:g} "
        )
    # why: the share only acts on an LSTM core (the core and policy head's optimiser group)
    lstm_share = getattr(section, "lstm_lr_scale", None)
    lstm = f" lstm_lr_scale={lstm_share:g}" if cfg.model.use_lstm and lstm_share is not None else ""
    learners = cfg.run.learners
    # why: B stays the batch of one update; each learner trains on B/N of it.
    share = f" learners={learners} (B/{learners} each)" if learners > 1 else ""
    return (
        f"gazelle: {cfg.algo} on {env.id}{atari}: model={model_words(cfg)} "
        f"actors={cfg.actors.num_actors}x{cfg.actors.envs_per_actor} envs "
        f"inference={cfg.actors.inference} device={run.device}{share} B={run.batch_size} "
        f"T={run.unroll_length} optimizer={cfg.algorithm.optimizer} lr={run.learning_rate:g}{lstm} "
        f"eps={cfg.algorithm.epsilon:g} entropy={cfg.algorithm.entropy_cost:g} {appo}"
        f"preset={cfg.algorithm.preset} total_frames={run.total_frames:,}"
    )
