"""Per-stage timing, torchbeast-style: cheap enough for the hot loops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timings:
    """Per-stage wall-clock timing (``time.perf_counter``), torchbeast-style.

    ``with timings.time("env"): ...`` or ``timings.add("env", seconds)``; ``means()`` gives
    ``{"timing/env": mean seconds per call}``. Not thread-safe: one instance per thread.
    """

    def __init__(self) -> None:
        self._totals: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, name: str, seconds: float) -> None:
        """Record one call of stage ``name`` that took ``seconds``."""
        self._totals[name] = self._totals.get(name, 0.0) + seconds
        self._counts[name] = self._counts.get(name, 0) + 1

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        """Time the body of the ``with`` block as one call of stage ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def means(self) -> dict[str, float]:
        """``{"timing/<stage>": mean seconds per call}`` since the last ``reset``."""
        return {f"timing/{k}": self._totals[k] / self._counts[k] for k in self._totals}

    def counts(self) -> dict[str, int]:
        """``{"<stage>": number of calls}`` since the last ``reset``."""
        return dict(self._counts)

    def reset(self) -> None:
        """Forget everything recorded."""
        self._totals.clear()
        self._counts.clear()
