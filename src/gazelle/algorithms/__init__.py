"""Algorithms: each a package or module with `train(config, on_progress=None)`, its loss,
its builder and its loop, wired from the runtime and a backend. `--algo` picks one here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gazelle.config import Config, ConfigError

#: `--algo` name -> module with `train(config, on_progress=None) -> TrainResult`.
ALGORITHMS = {
    "impala": "gazelle.algorithms.impala",
    "a3c": "gazelle.algorithms.a3c",
    "appo": "gazelle.algorithms.appo",
}


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """Train with the algorithm `config.algo` names; see `gazelle.algorithms.runstate`."""
    if config.algo not in ALGORITHMS:
        raise ConfigError("algo", config.algo, " | ".join(ALGORITHMS))
    module = importlib.import_module(ALGORITHMS[config.algo])
    return module.train(config, on_progress=on_progress)
