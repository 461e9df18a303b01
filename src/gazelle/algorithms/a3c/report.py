"""A3C's loop's reporting: what it makes of its workers' update events (non-finite pushes,
the stall watch, progress rows) and its first log line."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gazelle.actions import ActionSpec
from gazelle.algorithms.a3c.worker import MEASURE_EVERY
from gazelle.algorithms.common import model_words
from gazelle.algorithms.stops import NonFiniteCount
from gazelle.algorithms.telemetry import Telemetry
from gazelle.config import Config
from gazelle.logging import RunLogger, Timings
from gazelle.runtime.layer_stats import StallWatch
from gazelle.runtime.policy_health import DeadPolicyWatch, max_entropy
from gazelle.runtime.schedule import LinearDecay
from gazelle.runtime.unit_health import SaturationWatch


class UpdateWatch:
    """Watches the workers' "update" events as IMPALA's loop watches its learner steps:
    `--max-nonfinite-updates` pushes skipped in a row stop the run (`NonFiniteError`), and a
    torso whose updates stay below the stall ratio is warned about (`StallWatch`), and so
    is an LSTM whose gates stay saturated (`SaturationWatch`) and a policy gone deterministic
    before it learned (`DeadPolicyWatch`, fed per progress row).

    Events come per worker; "in a row" counts them in the order the loop receives them.
    """

    def __init__(
        self, config: Config, schedule: LinearDecay | None, actions: ActionSpec | None = None
    ) -> None:
        self.nonfinite = NonFiniteCount(config.run.max_nonfinite_updates)
        # why: a worker measures one update in MEASURE_EVERY (worker.py); each stands for all.
        self.stall = StallWatch(every=MEASURE_EVERY)
        self.saturation = SaturationWatch(every=MEASURE_EVERY)
        #: Fed by the loop once per progress row (`DeadPolicyWatch`).
        self.dead = DeadPolicyWatch(None if actions is None else max_entropy(actions))
        self.schedule = schedule
        self.pending: list[dict[str, Any]] = []  # since the last progress row

    def lr_scale(self, frames: int) -> float:
        """The learning rate now over `--learning-rate` (its decay, or 1)."""
        if self.schedule is None or not self.schedule.base_lr:
            return 1.0
        return self.schedule(frames) / self.schedule.base_lr

    def consume(self, updates: list[dict[str, Any]], frames: int, steps: int) -> None:
        """Count each update event; raises `NonFiniteError` at the limit."""
        scale = self.lr_scale(frames)
        for update in updates:
            self.nonfinite.record(bool(update.get("skipped")), frames)
            self.stall.update(update, steps, lr_scale=scale)
            self.saturation.update(update, steps)
        self.pending += updates

    def take(self) -> list[dict[str, Any]]:
        updates, self.pending = self.pending, []
        return updates


def log_progress(
    logger: RunLogger,
    frames: int,
    steps: int,
    updates: list[dict[str, Any]],
    telemetry: Telemetry,
    timings: Timings,
    fps: float,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> dict[str, float]:
    """One progress row: the mean of the workers' update summaries since the last row (the
    layer stats among them); returns its scalars."""
    names = sorted({k for u in updates for k in u if "/" in k})
    scalars: dict[str, float] = {
        name: float(np.mean([u[name] for u in updates if name in u])) for name in names
    }
    scalars.update(
        {
            "charts/fps": fps,
            "charts/updates": float(steps),
            "charts/skipped_updates": float(sum(u.get("skipped", 0.0) for u in updates)),
            "charts/actor_restarts": float(telemetry.restarts),
            "charts/actors_hung": float(telemetry.hung),
            "charts/env_errors": float(telemetry.env_errors),
            **timings.means(),
            **telemetry.scores(),
            **telemetry.level_metrics(),
        }
    )
    logger.scalars(scalars, frames)
    logger.progress(frames, fps, scalars)
    logger.console_line(frames, fps, actor_restarts=telemetry.restarts)
    timings.reset()
    if on_progress is not None:
        on_progress(
            {"frames": frames, "fps": fps, "time": time.monotonic(), "updates": steps,
             "episode_return": logger.recent_return()}
        )  # fmt: skip
    return scalars


def describe(config: Config, workers: int) -> str:
    """The first log line."""
    a3c, env = config.a3c, config.env
    inputs = "features+reward+action" if a3c.last_action_reward else "features"
    rollouts = "to episode end" if a3c.end_rollout_at_episode_end else "fixed"
    # why: the share only acts on an LSTM core (`SharedAdamServer`), so it is named there
    share = f" lstm_lr_scale={a3c.lstm_lr_scale:g}" if config.model.use_lstm else ""
    return (
        f"gazelle: a3c ({a3c.preset}) on {env.id}: model={model_words(config)} "
        f"workers={workers}x{config.actors.envs_per_actor} envs "
        f"frames={env.atari_frames or 'as the env'} core_inputs={inputs} "
        f"init={config.model.init} advantages={a3c.advantage_values} values "
        f"rollouts={rollouts} T={a3c.unroll_length} adam lr={a3c.learning_rate:g}{share} "
        f"gamma={a3c.discounting} lambda={a3c.gae_lambda} entropy={a3c.entropy_cost} "
        f"clip={a3c.grad_norm_clip} total_frames={config.run.total_frames:,}"
    )
