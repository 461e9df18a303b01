"""The learning-rate schedule every decaying algorithm follows (IMPALA and APPO always, A3C
with `--learning-rate-decay`): the IMPALA seed's linear decay to 0 over the run's frames,
kept in the checkpoint so that a resume with another budget or rate continues it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LinearDecay:
    """A learning rate that falls linearly from `lr` at `start_frames` to 0 at `end_frames`
    (and stays 0 after): `lr * (1 - (frames - start) / (end - start))`. `base_lr` is the
    `--learning-rate` it was made from.

    A fresh run's is `LinearDecay.fresh(lr, total_frames)`, the seed's
    `tf.train.polynomial_decay` to 0; a resumed run's comes from its checkpoint's (`resumed`).
    """

    lr: float
    start_frames: int
    end_frames: int
    base_lr: float

    @classmethod
    def fresh(cls, lr: float, total_frames: int) -> LinearDecay:
        """`lr` at frame 0 down to 0 at `total_frames`."""
        return cls(lr, 0, total_frames, lr)

    def __call__(self, frames: int) -> float:
        span = self.end_frames - self.start_frames
        if span <= 0:
            return 0.0
        progress = min(max(frames - self.start_frames, 0), span) / span
        return self.lr * (1.0 - progress)

    def resumed(self, frames: int, fresh: LinearDecay) -> LinearDecay:
        """The schedule of a run resumed at `frames`: `self` is the one its checkpoint was
        saved with, `fresh` the one its command asks for (`LinearDecay.fresh`).

        - the same budget and rate: `self`, so the resume is exact;
        - another budget, the run not at its end: from the rate `self` has reached at
          `frames` down to 0 at the new end, with no step where the run resumes;
        - another budget, the run at its end (its rate is 0): `fresh`, the new budget's own
          line (continuing from 0 would never learn again);
        - another `--learning-rate`: that rate from `frames` down to 0 at the end (the rate
          a user names is the rate meant from now on)."""
        if fresh.base_lr != self.base_lr:
            return LinearDecay(fresh.base_lr, frames, fresh.end_frames, fresh.base_lr)
        if fresh.end_frames == self.end_frames:
            return self
        if frames >= self.end_frames:
            return fresh
        return LinearDecay(self(frames), frames, fresh.end_frames, self.base_lr)

    def to_dict(self) -> dict[str, float]:
        """For a checkpoint (plain numbers: `torch.load(weights_only=True)` reads them)."""
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LinearDecay:
        return cls(
            float(state["lr"]), int(state["start_frames"]), int(state["end_frames"]),
            float(state["base_lr"]),
        )  # fmt: skip
