"""APPO's run: IMPALA's builder and loop whole, with APPO's loss (`appo.loss`); the passes
over each batch are IMPALA's loop's (`impala.loop.train_on_batch`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.learning import loss_settings, with_popart
from gazelle.algorithms.impala.loop import train as impala_train
from gazelle.config import Config
from gazelle.runtime.learner import LossFn


def make_loss(config: Config) -> LossFn:
    """APPO's loss with a resolved config's settings."""
    section = config.algorithm
    assert section.clip_ratio is not None and section.normalize_advantages is not None
    settings = AppoSettings(
        loss_settings(config),
        float(section.clip_ratio),
        bool(section.normalize_advantages),
        section.targets or "step",
    )
    return with_popart(config, functools.partial(appo_loss, settings=settings))


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """Train APPO with `config` (resumes from its logdir's checkpoint if there is one)."""
    return impala_train(config, on_progress, make_loss=make_loss)
