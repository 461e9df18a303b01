"""A3C's test of whether the task needs memory (`gazelle.runtime.memory_check`, issue 58).

IMPALA's learner runs the check on its batches. A3C's main process never sees a rollout, so
worker 0 runs it, on its own rollouts, and reports the gains with its updates. The check's
thresholds were measured on IMPALA's vector batches: 16 unrolls of 20 steps
(docs/notes/lstm.md, "Memory at defaults"). So `MemoryFeed` lays the worker's rollouts out
the same way before the check sees them. Consecutive rollouts of one worker are consecutive
in time (`[t+1, E]` each, index 0 repeating the previous one's last step, lengths varying
when a rollout ends at an episode's end). The feed joins them along time and deals each
`CHUNKS x STEPS` steps of every env into `CHUNKS` unrolls of `STEPS + 1`, which gives
batches of `[STEPS + 1, CHUNKS * E]`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gazelle.runtime.memory_check import MemoryCheck, readable
from gazelle.types import ObsSpec

#: The unroll length and unrolls per env of a batch the check sees (IMPALA's vector preset:
#: T=20; with A3C's 4 envs per worker, 4 chunks make its 16 unrolls).
STEPS, CHUNKS = 20, 4


class MemoryFeed:
    """Joins one worker's rollouts and feeds the check whole batches (module docstring)."""

    def __init__(self, check: MemoryCheck, names: list[str]) -> None:
        self.check, self.names = check, names
        self._steps: list[dict[str, torch.Tensor]] = []  # pieces `[t, E]`, in time order
        self._held = 0  # steps held after the first piece's index 0
        self.metrics: dict[str, float] = {}

    def add(self, rollout: dict[str, torch.Tensor]) -> dict[str, float]:
        """Take a rollout; returns the check's latest `memory/*` metrics ({} before any)."""
        if not self.check.active:
            return self.metrics
        # why: index 0 repeats the last step held; the first piece keeps it as the start
        piece = {n: rollout[n] if not self._steps else rollout[n][1:] for n in self.names}
        self._steps.append(piece)
        self._held += piece["reward"].shape[0] - (1 if len(self._steps) == 1 else 0)
        need = STEPS * CHUNKS
        while self._held >= need and self.check.active:
            joined = {n: torch.cat([p[n] for p in self._steps]) for n in self.names}
            # why: chunk k is steps k*STEPS .. (k+1)*STEPS, its index 0 the step before it
            chunks = [
                {n: v[k * STEPS : (k + 1) * STEPS + 1] for n, v in joined.items()}
                for k in range(CHUNKS)
            ]
            batch = {n: torch.cat([c[n] for c in chunks], dim=1) for n in self.names}
            self.metrics = self.check.observe(batch) or self.metrics
            self._steps = [{n: v[need:] for n, v in joined.items()}]
            self._held -= need
        return self.metrics


def memory_feed(
    spec: ObsSpec, use_lstm: bool, seed: int, warn: Callable[[str], None]
) -> MemoryFeed | None:
    """Worker 0's feed, or None where the check does not apply: an agent with an LSTM, or
    observations it cannot read (images only)."""
    if use_lstm or not readable(spec):
        return None
    names = [f.name for f in spec.fields] + ["reward", "action", "terminated", "truncated"]
    return MemoryFeed(MemoryCheck(spec, warn=warn, seed=seed), names)
