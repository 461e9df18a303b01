"""APPO: IMPALA's actors, batches and V-trace targets, with PPO's clipped surrogate loss and
several optimiser steps per batch (`--epochs` passes of `--minibatches` steps), as Sample
Factory and RLlib ship it. It reuses IMPALA's builder and loop whole; what differs is the
loss (`appo.loss`) and the passes (`impala.loop.train_on_batch`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.build import loss_settings, with_popart
from gazelle.algorithms.impala.loop import train as impala_train
from gazelle.algorithms.runstate import TrainResult
from gazelle.config import Config
from gazelle.runtime.learner import LossFn

__all__ = ["AppoSettings", "TrainResult", "appo_loss", "make_loss", "train"]


def make_loss(config: Config) -> LossFn:
    """APPO's loss with a resolved config's settings."""
    section = config.appo
    assert section.clip_ratio is not None and section.normalize_advantages is not None
    settings = AppoSettings(
        loss_settings(config), float(section.clip_ratio), bool(section.normalize_advantages)
    )
    return with_popart(config, functools.partial(appo_loss, settings=settings))


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """Train APPO with `config` (resumes from its logdir's checkpoint if there is one)."""
    return impala_train(config, on_progress, make_loss=make_loss)
