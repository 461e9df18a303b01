"""APPO: IMPALA's actors, batches and V-trace targets, with PPO's clipped surrogate loss and
several optimiser steps per batch (`--epochs` passes of `--minibatches` steps), as Sample
Factory and RLlib ship it. It reuses IMPALA's builder and loop whole; what differs is the
section (`settings`), the presets on top of IMPALA's (`presets`), the loss (`appo.loss`)
and the passes (`impala.loop.train_on_batch`).

`APPO` below is everything the rest of gazelle knows of it (`gazelle.config.registry`). The
heavy modules load when first used: reading the config needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gazelle.algorithms.appo.presets import PRESETS
from gazelle.algorithms.appo.settings import AppoConfig, validate_appo
from gazelle.algorithms.impala import learner_rate, measure_parts
from gazelle.config.registry import Algorithm

if TYPE_CHECKING:
    from gazelle.config import Config


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """`gazelle.algorithms.appo.loop.train`: train APPO."""
    from gazelle.algorithms.appo.loop import train as run

    return run(config, on_progress)


APPO = Algorithm(
    name="appo",
    section=AppoConfig,
    train=train,
    presets=PRESETS,
    validate=validate_appo,
    # why: IMPALA's learner, passed over each sample `epochs` times (`impala.build`).
    learner_rate=learner_rate,
    # The algorithm of a run that names none on ViZDoom (`--algo` unset). On
    # VizdoomBasic-v1 IMPALA's loss stayed at random play's level (-123 to -180 at 800K
    # frames over 9 probes: 2 seeds, LSTM or not, lr 3e-4, lambda 0.95, entropy 0.03,
    # B=4 x T=16, rewards scaled instead of PopArt) while APPO's two epochs x two
    # minibatches learned it (+21 and +41, seeds 1-2); APPO with one pass over each batch
    # did not (-135), so it is the reuse of each batch. DefendCenter learned as fast either
    # way (4.1 against 4.0 and 4.5); HealthGathering ~10% lower at 800K frames (1,699 and
    # 1,501 against 1,771 and 1,785) and level after 30 minutes (1,705 against 1,740); 30
    # minutes of DefendCenter: 21.3 against 19.0 (docs/results.md, "ViZDoom").
    # Continuous control (a float Box action, vector observations): PPO's shape of update
    # with the clip anchored at the learner learned HalfCheetah-v5 (621 at 250K frames,
    # seed 1), IMPALA's one pass at its best lr 29 (docs/notes/continuous.md).
    env_families=("vizdoom", "control"),
    measure_parts=measure_parts,
)

#: What this package re-exports, loaded when first asked for (PEP 562).
_LAZY = {
    "AppoSettings": "gazelle.algorithms.appo.loss",
    "appo_loss": "gazelle.algorithms.appo.loss",
    "make_loss": "gazelle.algorithms.appo.loop",
    "TrainResult": "gazelle.algorithms.runstate",
}

__all__ = ["APPO", "AppoConfig", "train", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
