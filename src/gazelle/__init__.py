"""Gazelle: scalable actor-learner reinforcement learning (IMPALA, A3C) in PyTorch.

The public API, re-exported lazily (PEP 562) so that `import gazelle.envs` in an actor
process does not pay for the whole package:

    import gazelle

    result = gazelle.train(gazelle.Config.of(env="CartPole-v1", total_frames=1_000_000))
    gazelle.evaluate(result.logdir, episodes=10)

Torsos and envs of your own: `gazelle.register_torso(name, factory)` and
`gazelle.register_env(name, maker)` (docs/api.md).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Config": "gazelle.config",
    "ConfigError": "gazelle.config",
    "train": "gazelle.api",
    "TrainResult": "gazelle.algorithms.runstate",
    "evaluate": "gazelle.evaluation",
    "register_torso": "gazelle.plugins",
    "register_env": "gazelle.plugins",
    "Torso": "gazelle.models.torsos",
    "make": "gazelle.envs",
    "Agent": "gazelle.models",
    "ObsSpec": "gazelle.types",
    "AgentOutput": "gazelle.types",
    "StepOutput": "gazelle.types",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gazelle' has no attribute {name!r}")
