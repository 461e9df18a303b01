"""The learner's weights on Ray: put into the object store once per version, fetched by
reference by every actor (and the central inference server)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from torch import nn

from gazelle.runtime.weights import flatten

#: The longest wait for the weights' object (an actor's, the inference server's): a fetch
#: that stalls this long raises (the caller is then replaced, or the server fails the run).
FETCH_TIMEOUT_S = 120.0


class RayParams:
    """The learner's `ParamPublisher`: `publish` keeps a CPU copy; the pump `ray.put`s it
    once, when it next hands work to an actor, and every actor fetches that one object."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flat: np.ndarray | None = None
        self._version = -1
        self._ref: Any = None
        self._ref_version = -2
        self.puts = 0

    def publish(self, module: nn.Module, version: int) -> None:
        flat = flatten(module).numpy()
        with self._lock:
            self._flat, self._version = flat, version

    def forget(self) -> None:
        """Drop the object reference (before Ray shuts down)."""
        with self._lock:
            self._ref, self._ref_version = None, -2

    def latest(self) -> tuple[list[Any], int]:
        """`([ref], version)` of the newest weights (put now if not yet in the store)."""
        import ray

        with self._lock:
            if self._ref_version != self._version and self._flat is not None:
                self._ref, self._ref_version = ray.put(self._flat), self._version
                self.puts += 1
            return [self._ref], self._ref_version
