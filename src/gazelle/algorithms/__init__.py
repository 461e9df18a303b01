"""Algorithms: each a package (`impala/`, `a3c/`, `appo/`) that declares one `Algorithm` (its
config section, presets, validation, layout cost, `train`), found by `--algo` through
`gazelle.config.registry`, and wires its loss, builder and loop from the runtime and a
backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gazelle.config import Config, registry


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """Train with the algorithm `config.algo` names; see `gazelle.algorithms.runstate`."""
    return registry.algorithm(config.algo).train(config, on_progress=on_progress)
