"""Liveness of the Ray actors a run cannot do without (the central inference server, A3C's
parameter server), checked without ever blocking the learner.

One `ping` call is outstanding at a time. `check()` looks at it without waiting: answered,
it sends the next one; failed (the actor died, its node left, its method raised), or
unanswered for `timeout_s` (a stopped process, a wedged thread), it raises `RunError` with
one line. Until the first answer the actor may still be starting (importing torch on a busy
machine took over a minute), so the first ping may take `start_timeout_s`. The loop calls
`check()` as often as it likes: it costs one `ray.wait(timeout=0)`.
"""

from __future__ import annotations

import time
from typing import Any

from gazelle.backends.ray.supervisor import START_TIMEOUT_S
from gazelle.errors import RunError


class Heartbeat:
    """Watches `handle` through its zero-argument method `method` (e.g. "stats")."""

    def __init__(
        self,
        handle: Any,
        method: str,
        what: str,
        timeout_s: float,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        """`what`: the actor's name in messages; `timeout_s`: the longest silence once it
        answered; `start_timeout_s`: the longest wait for its first answer."""
        import ray

        self._ray, self.handle, self.method, self.what = ray, handle, method, what
        self.timeout_s, self.start_timeout_s = timeout_s, max(timeout_s, start_timeout_s)
        self._ref: Any = None
        self._sent = 0.0
        self._answered = False
        self.last: Any = None  # the last answer

    def check(self) -> None:
        ray = self._ray
        now = time.monotonic()
        if self._ref is None:
            self._ref, self._sent = getattr(self.handle, self.method).remote(), now
            return
        ready, _ = ray.wait([self._ref], timeout=0)
        if not ready:
            limit = self.timeout_s if self._answered else self.start_timeout_s
            if now - self._sent > limit:
                raise RunError(
                    f"the {self.what} gave no answer for {now - self._sent:.0f} s "
                    "(--actor-timeout-s): stopped, wedged or its node is gone"
                )
            return
        try:
            self.last = ray.get(self._ref)  # ready: ray.wait found it answered
            self._answered = True
        except ray.exceptions.RayError as error:
            reason = str(error).strip().splitlines()
            raise RunError(
                f"the {self.what} failed: {type(error).__name__}: {reason[-1] if reason else ''}"[
                    :500
                ]
            ) from error
        self._ref, self._sent = getattr(self.handle, self.method).remote(), now

    def forget(self) -> None:
        """Drop the outstanding call (before Ray shuts down)."""
        self._ref = None
