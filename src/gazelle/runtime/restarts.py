"""How often a fleet may replace one actor: a budget per time window, with backoff.

A lifetime cap ends a long run for faults spread over hours (one lost node a day); no cap
lets a crash loop spin forever. A window counts only recent restarts: an actor may be
replaced `max_restarts` times within `window_s` seconds, and each replacement within the
window waits twice as long as the one before (0 s, then 1, 2, 4 ... up to `max_backoff_s`),
so a crash loop slows down and then stops the run with its reason, while a fault now and
then never adds up.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from gazelle.errors import RunError

#: Seed offset per restart, so a restarted process does not replay the same episodes.
RESTART_SEED_STRIDE = 100_003

#: A process that dies before its first heartbeat this many times in a row cannot start (a
#: script that calls `gazelle.train` without the main guard, an env module the process
#: cannot import): the run stops with one line instead of replacing it again and again.
FAILED_STARTS = 3

#: Defaults: 10 replacements of one actor within 10 minutes stop the run.
MAX_RESTARTS = 10
WINDOW_S = 600.0
MAX_BACKOFF_S = 60.0


class RestartBudget:
    """Restarts of one actor. `record(reason)` returns the seconds to wait before starting
    the replacement, or raises `RunError` when the window's budget is spent."""

    def __init__(
        self,
        what: str,
        max_restarts: int = MAX_RESTARTS,
        window_s: float = WINDOW_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`what`: the actor's name in messages (e.g. "actor 3")."""
        self.what = what
        self.max_restarts, self.window_s, self.max_backoff_s = max_restarts, window_s, max_backoff_s
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()
        self.total = 0

    def recent(self) -> int:
        """Restarts within the last `window_s` seconds."""
        now = self._clock()
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        return len(self._times)

    def record(self, reason: str) -> float:
        """Count one restart now; the delay before the replacement starts (seconds)."""
        recent = self.recent()
        if recent >= self.max_restarts:
            raise RunError(
                f"{self.what} was replaced {recent} times in the last {self.window_s:.0f} s "
                f"(last: {reason}); giving up"
            )
        self._times.append(self._clock())
        self.total += 1
        return 0.0 if recent == 0 else min(self.max_backoff_s, 2.0 ** (recent - 1))


class FailedStarts:
    """Per process, its deaths before a first sign of life in a row (`FAILED_STARTS`)."""

    def __init__(self, processes: int) -> None:
        self.in_a_row = [0] * processes

    def record(self, index: int, before_start: bool, what: str, exitcode: int | None) -> None:
        """Count a death of process `index` ("actor 0": `what`); raise `RunError` at the
        `FAILED_STARTS`-th in a row before it started."""
        self.in_a_row[index] = self.in_a_row[index] + 1 if before_start else 0
        if self.in_a_row[index] >= FAILED_STARTS:
            raise RunError(
                f"{what} died before it started, {FAILED_STARTS} times in a row (last exit "
                f"code {exitcode}; its error is above): a script that calls gazelle.train() "
                "outside `if __name__ == '__main__':`, or an env or module the process "
                "cannot import (docs/troubleshooting.md)"
            )
