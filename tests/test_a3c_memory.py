"""A3C's memory check is fed IMPALA's batch layout (gazelle.algorithms.a3c.memory).

Worker 0's rollouts, consecutive in time and of varying lengths, must reach the check as
`[STEPS + 1, CHUNKS * E]` batches whose unrolls are consecutive `STEPS`-step windows of each
env's one stream of steps, each window's index 0 being the step before it, and no step
dropped or repeated across batches. The check only in its layout: its verdicts are
tests/test_memory_check.py's and, through the CLI, tests/test_memory_warning.py's.
"""

from __future__ import annotations

from typing import Any

import torch

from gazelle.algorithms.a3c.memory import CHUNKS, STEPS, MemoryFeed, memory_feed
from gazelle.types import ObsSpec

ENVS = 3
NAMES = ["frame", "reward", "action", "terminated", "truncated"]


class Recorder:
    """Stands in for `MemoryCheck`: keeps what it is fed, active for `window` batches."""

    def __init__(self, window: int = 100) -> None:
        self.batches: list[dict[str, torch.Tensor]] = []
        self.window = window

    @property
    def active(self) -> bool:
        return len(self.batches) < self.window

    def observe(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.batches.append(batch)
        return {"memory/batches": float(len(self.batches))}


def stream(steps: int) -> dict[str, torch.Tensor]:
    """Each env's steps 0..steps, every field holding its step number (env e: + 1000 e)."""
    t = torch.arange(steps + 1).unsqueeze(1) + 1000 * torch.arange(ENVS)
    return {
        "frame": t.unsqueeze(-1).float().repeat(1, 1, 2),
        "reward": t.float(),
        "action": t,
        "terminated": t % 7 == 0,
        "truncated": t % 11 == 0,
    }


def rollouts(whole: dict[str, torch.Tensor], lengths: list[int]) -> list[dict[str, Any]]:
    """`whole` cut as a worker's rollouts: `[t+1, E]` each, index 0 the step before."""
    out, start = [], 0
    for n in lengths:
        out.append({k: v[start : start + n + 1] for k, v in whole.items()})
        start += n
    return out


def test_rollouts_of_any_length_reach_the_check_as_windows_of_each_envs_steps() -> None:
    g = torch.Generator().manual_seed(0)
    lengths = [int(x) for x in torch.randint(1, 2 * STEPS + 1, (60,), generator=g)]
    whole = stream(sum(lengths))
    recorder = Recorder()
    feed = MemoryFeed(recorder, NAMES)  # type: ignore[arg-type]
    for rollout in rollouts(whole, lengths):
        feed.add(rollout)
    per_batch = STEPS * CHUNKS
    assert len(recorder.batches) == sum(lengths) // per_batch
    for b, batch in enumerate(recorder.batches):
        for name in NAMES:
            assert batch[name].shape[:2] == (STEPS + 1, CHUNKS * ENVS)
            for k in range(CHUNKS):
                start = b * per_batch + k * STEPS
                expected = whole[name][start : start + STEPS + 1]
                assert torch.equal(batch[name][:, k * ENVS : (k + 1) * ENVS], expected)


def test_the_feed_stops_when_the_check_has_seen_its_window_and_keeps_its_last_metrics() -> None:
    recorder = Recorder(window=2)
    feed = MemoryFeed(recorder, NAMES)  # type: ignore[arg-type]
    metrics = {}
    for rollout in rollouts(stream(10 * STEPS * CHUNKS), [STEPS] * 10 * CHUNKS):
        metrics = feed.add(rollout)
    assert len(recorder.batches) == 2
    assert metrics == {"memory/batches": 2.0}
    # why: past the window the feed holds no more steps (a worker runs for hours)
    assert sum(piece["reward"].shape[0] for piece in feed._steps) <= STEPS * CHUNKS + 1


def test_no_feed_for_an_lstm_agent_or_an_image_only_env() -> None:
    vector = ObsSpec((4,), torch.float32, num_actions=2)
    image = ObsSpec((3, 8, 8), torch.uint8, num_actions=2)
    assert memory_feed(vector, use_lstm=False, seed=0, warn=print) is not None
    assert memory_feed(vector, use_lstm=True, seed=0, warn=print) is None
    assert memory_feed(image, use_lstm=False, seed=0, warn=print) is None
