"""What the learner trains on, one batch at a time: `batch/*` progress metrics.

A broken env wrapper rarely crashes. A frame stack that stops advancing, a reward that is
never paid or an episode end that never comes all make batches of the right shape and dtype,
and the run trains on them quietly. These numbers catch that class of fault. They need
nothing of the env but the unroll's data contract (`gazelle.types`), so they hold for any
env and algorithm whose learner takes `[T+1, B]` unrolls. CI's Atari check reads them
(tests/test_atari_gate.py):

- `batch/reward_steps`: the share of the batch's steps with a nonzero reward (as the env
  gave it, before `--reward-clipping`);
- `batch/episode_ends`: the share of its steps that end an episode (terminated or
  truncated); with Atari's life-loss rule, a lost life ends one;
- `batch/obs_repeats`: the share of its steps whose observation is the step's before, byte
  for byte in every field. An env whose screen moves is near 0; a frozen observation is 1.

Each is over the `T x B` new steps of a batch; `BatchStats` averages them over the batches
since the last progress row (one batch of Atari's preset holds a few episode ends).
Index 0 of an unroll repeats the last step of the one before (`gazelle.types`), so it is
only the reference for step 1.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


def batch_stats(batch: dict[str, torch.Tensor], obs_keys: Iterable[str]) -> dict[str, float]:
    """The `batch/*` metrics of one learner batch.

    Args:
        batch: time-major fields, each `[T+1, B, ...]`: `reward`, `terminated`,
            `truncated` and the observation's fields.
        obs_keys: the observation's field names (`ObsSpec.fields`, e.g. `("frame",)`);
            none: no `batch/obs_repeats`.
    """
    reward = batch["reward"][1:]  # why: index 0 repeats the previous unroll's last step
    ends = batch["terminated"][1:] | batch["truncated"][1:]
    stats = {
        "batch/reward_steps": float((reward != 0).float().mean()),
        "batch/episode_ends": float(ends.float().mean()),
    }
    fields = [batch[key] for key in obs_keys]
    if fields:
        same = np.ones(tuple(ends.shape), dtype=bool)
        for field in fields:
            # why: step t against t-1; index 0 is step 1's reference only.
            same &= _repeats(field)
        stats["batch/obs_repeats"] = float(same.mean())
    return stats


def _repeats(field: torch.Tensor) -> np.ndarray:
    """`[T+1, B, ...]` -> bool `[T, B]`: step t's value is step t-1's, byte for byte. On the
    CPU each step's bytes compare as 8-byte words where they divide (an Atari batch in
    ~0.4 ms so, against ~14 ms element by element with torch on one thread of this
    machine); on a GPU where the batch is, without moving its frames to the host."""
    field = field.detach()
    if field.device.type != "cpu":
        flat = field.reshape(*field.shape[:2], -1)
        return (flat[1:] == flat[:-1]).all(dim=-1).cpu().numpy()
    words = field.contiguous().numpy()
    words = words.reshape(*words.shape[:2], -1).view(np.uint8)
    if words.shape[-1] % 8 == 0:
        words = words.view(np.int64)
    return (words[1:] == words[:-1]).all(axis=-1)


class BatchStats:
    """`batch_stats` summed over batches: `means()` is the mean of every batch's since the
    last `reset()` (the loop resets at each progress row)."""

    def __init__(self, obs_keys: Iterable[str]) -> None:
        self.obs_keys = tuple(obs_keys)
        self.reset()

    def reset(self) -> None:
        self._sums: dict[str, float] = {}
        self._count = 0

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        for name, value in batch_stats(batch, self.obs_keys).items():
            self._sums[name] = self._sums.get(name, 0.0) + value
        self._count += 1

    def means(self) -> dict[str, float]:
        return {name: total / self._count for name, total in self._sums.items()}
