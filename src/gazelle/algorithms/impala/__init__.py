"""IMPALA (Espeholt et al., 2018): actors unroll the agent, the learner corrects the policy
lag with V-trace. `settings` is its config section, `presets` its presets, `loss` pairs the
batch for `gazelle.losses`, `build` wires a run from a config, `loop.train` runs it.

`IMPALA` below is everything the rest of gazelle knows of it (`gazelle.config.registry`).
The heavy modules load when first used: reading the config needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gazelle.algorithms.impala.presets import IMPALA_PRESETS
from gazelle.algorithms.impala.settings import ImpalaConfig, validate_impala
from gazelle.config.registry import Algorithm

if TYPE_CHECKING:
    import torch

    from gazelle.config import Config
    from gazelle.envs.probe import EnvProbe


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None,
          **kwargs: Any) -> Any:  # fmt: skip
    """`gazelle.algorithms.impala.loop.train`: train IMPALA (`loss_fn=` replaces V-trace)."""
    from gazelle.algorithms.impala.loop import train as run

    return run(config, on_progress, **kwargs)


def learner_rate(config: Config, found: EnvProbe, device: torch.device) -> Callable[[float], float]:
    """The layout's learner cost (`gazelle.algorithms.impala.build.learner_rate`)."""
    from gazelle.algorithms.impala.build import learner_rate as measure

    return measure(config, found, device)


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """`gazelle bench`'s parts (`gazelle.algorithms.impala.parts`)."""
    from gazelle.algorithms.impala.parts import measure_parts as measure

    return measure(config, seconds, rounds)


IMPALA = Algorithm(
    name="impala",
    section=ImpalaConfig,
    train=train,
    presets=IMPALA_PRESETS,
    validate=validate_impala,
    learner_rate=learner_rate,
    own_presets=("impala-paper",),
    takes_loss_fn=True,
    measure_parts=measure_parts,
)

#: What this package re-exports, loaded when first asked for (PEP 562). Not `build`: the
#: submodule of that name would shadow it (`gazelle.algorithms.impala.build.build`).
_LAZY = {
    "ImpalaRun": "gazelle.algorithms.impala.build",
    "LossSettings": "gazelle.algorithms.impala.loss",
    "impala_loss": "gazelle.algorithms.impala.loss",
    "TrainResult": "gazelle.algorithms.runstate",
}

__all__ = ["IMPALA", "ImpalaConfig", "train", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
