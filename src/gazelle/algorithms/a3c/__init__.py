"""A3C (Mnih et al., 2016, as OpenAI's universe-starter-agent runs it): asynchronous
workers, each with a local copy of the global network and a runner thread filling a queue of
partial rollouts; GAE; gradients clipped and applied to the global network by a shared Adam.
`settings` (its config section), `presets`, `rollouts` (the runner's queue), `loss`,
`shared_adam` (the global network's optimiser), `worker` (one worker process), `loop.train`.

`A3C` below is everything the rest of gazelle knows of it (`gazelle.config.registry`). The
heavy modules load when first used: reading the config needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gazelle.algorithms.a3c.presets import A3C_PRESETS
from gazelle.algorithms.a3c.settings import A3CConfig, validate_a3c
from gazelle.config.registry import Algorithm

if TYPE_CHECKING:
    from gazelle.config import Config


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """`gazelle.algorithms.a3c.loop.train`: train A3C."""
    from gazelle.algorithms.a3c.loop import train as run

    return run(config, on_progress)


def measure_parts(config: Config, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """`gazelle bench`'s parts of one worker (`gazelle.algorithms.a3c.parts`)."""
    from gazelle.algorithms.a3c.parts import measure_a3c_parts

    return measure_a3c_parts(config, seconds, rounds)


A3C = Algorithm(
    name="a3c",
    section=A3CConfig,
    train=train,
    presets=A3C_PRESETS,
    validate=validate_a3c,
    # why: each worker learns for itself; no learner shares the cores with the actors.
    learner_rate=None,
    atari_frames="universe",  # the seed's 42x42 frames
    image_torso="universe",  # the seed's conv torso
    own_presets=("universe-starter",),
    measure_parts=measure_parts,
)

#: What this package re-exports, loaded when first asked for (PEP 562).
_LAZY = {
    "A3CLossSettings": "gazelle.algorithms.a3c.loss",
    "a3c_loss": "gazelle.algorithms.a3c.loss",
}

__all__ = ["A3C", "A3CConfig", "train", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
