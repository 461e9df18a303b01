"""The `batch/*` metrics: what the learner trains on (gazelle.runtime.batch_stats).

Each share is counted by hand on a small batch, against a slow reference that walks the
steps one by one; index 0 of an unroll (the previous unroll's last step) must never count.
"""

from __future__ import annotations

import pytest
import torch

from gazelle.runtime.batch_stats import BatchStats, batch_stats


def _reference(batch: dict[str, torch.Tensor], keys: list[str]) -> dict[str, float]:
    """Walk the new steps t = 1..T of every unroll b."""
    steps, b_size = batch["reward"].shape
    paid = ended = repeated = 0
    for b in range(b_size):
        for t in range(1, steps):
            paid += float(batch["reward"][t, b]) != 0.0
            ended += bool(batch["terminated"][t, b]) or bool(batch["truncated"][t, b])
            repeated += all(torch.equal(batch[k][t, b], batch[k][t - 1, b]) for k in keys)
    n = (steps - 1) * b_size
    return {
        "batch/reward_steps": paid / n,
        "batch/episode_ends": ended / n,
        "batch/obs_repeats": repeated / n,
    }


def _batch(seed: int, steps: int = 6, b_size: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    frame = torch.randint(0, 2, (steps, b_size, 2, 2, 2), generator=g, dtype=torch.uint8)
    # why: repeat some frames so that both kinds of step occur
    frame[2] = frame[1]
    frame[4, 0] = frame[3, 0]
    return {
        "reward": torch.randint(-1, 2, (steps, b_size), generator=g).float(),
        "terminated": torch.rand(steps, b_size, generator=g) < 0.3,
        "truncated": torch.rand(steps, b_size, generator=g) < 0.1,
        "frame": frame,
        "speed": torch.randn(steps, b_size, 1, generator=g),
        "action": torch.zeros(steps, b_size, dtype=torch.long),
    }


def test_each_share_matches_a_walk_over_the_new_steps() -> None:
    for seed in range(5):
        batch = _batch(seed)
        got = batch_stats(batch, ["frame"])
        assert got == pytest.approx(_reference(batch, ["frame"]), abs=1e-6)
        assert got["batch/obs_repeats"] > 0


def test_a_step_repeats_only_when_every_field_does() -> None:
    batch = _batch(0)
    only_frame = batch_stats(batch, ["frame"])["batch/obs_repeats"]
    both = batch_stats(batch, ["frame", "speed"])
    # why: `speed` is random floats, never equal from one step to the next
    assert only_frame > 0 and both["batch/obs_repeats"] == 0.0
    assert both == pytest.approx(_reference(batch, ["frame", "speed"]), abs=1e-6)


def test_index_zero_of_the_unroll_is_never_counted() -> None:
    batch = _batch(1)
    batch["reward"][0] = 5.0
    batch["terminated"][0] = True
    batch["frame"][0] = 255  # step 1 then differs from it in every unroll
    got = batch_stats(batch, ["frame"])
    assert got == pytest.approx(_reference(batch, ["frame"]), abs=1e-6)
    batch["reward"][0], batch["terminated"][0] = 0.0, False
    assert batch_stats(batch, ["frame"]) == got


def test_a_frozen_observation_repeats_at_every_step() -> None:
    batch = _batch(2)
    batch["frame"][:] = batch["frame"][0]
    assert batch_stats(batch, ["frame"])["batch/obs_repeats"] == 1.0


def test_no_field_gives_no_repeat_share() -> None:
    assert "batch/obs_repeats" not in batch_stats(_batch(3), [])


def test_the_running_means_are_over_the_batches_since_the_reset() -> None:
    stats = BatchStats(["frame"])
    first, second, third = _batch(0), _batch(1), _batch(2)
    stats.add(first)
    stats.add(second)
    a, b = batch_stats(first, ["frame"]), batch_stats(second, ["frame"])
    assert stats.means() == pytest.approx({k: (a[k] + b[k]) / 2 for k in a})
    stats.reset()
    stats.add(third)
    assert stats.means() == batch_stats(third, ["frame"])
