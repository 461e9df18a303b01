"""The actors' telemetry (`gazelle.algorithms.telemetry`) as the local backend delivers it."""

from __future__ import annotations

import multiprocessing

import pytest

from gazelle.algorithms.telemetry import Telemetry
from gazelle.backends.local.channels import fits, receive_all
from gazelle.backends.local.child import event_sender
from gazelle.logging import RunLogger, Timings

LEVEL = "VizdoomBasic-v1"


def test_an_unroll_too_big_for_one_message_reaches_the_logs_whole(tmp_path):
    """Short games with statistics (ViZDoom's Basic once learned: 60 games in one 8-env
    unroll) make an unroll event bigger than one atomic pipe write; the sender splits its
    episodes over several messages and only the first carries the timings and action counts.
    Every game is logged, the timings and counts once (a run crashed on the second part's
    missing timings, 2026-12-02)."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    stats = {"kills": 1.0, "items": 0.0, "damage_taken": 0.0, "health": 100.0, "ammo": 48.0}
    episodes = [(80.0 + i, 10 + i, {**stats, "died": float(i % 2)}) for i in range(60)]
    timing = (0.001, 0.002, 0.0005)
    event = {"type": "unroll", "actor": 0, "level_id": 0, "episodes": episodes,
             "timing": timing, "action_counts": [5, 6, 7, 8]}  # fmt: skip
    assert not fits(event)
    event_sender(writer)(event)
    received, _ = receive_all(reader)
    assert len(received) > 1
    logger = RunLogger(tmp_path, console=False, tensorboard=False)
    timings = Timings()
    telemetry = Telemetry(logger, timings, [LEVEL], frame_scale=4)
    telemetry.consume(received, frames=1_000)
    assert telemetry.episodes == 60 and telemetry.level_episodes[LEVEL] == 60
    assert logger.level_returns()[LEVEL] == [80.0 + i for i in range(60)]
    metrics = telemetry.level_metrics()
    assert metrics[f"episode_kills/{LEVEL}"] == 1.0
    assert metrics[f"episode_died/{LEVEL}"] == pytest.approx(0.5)
    assert metrics[f"frames/{LEVEL}"] == (5 + 6 + 7 + 8) * 4  # counted once, not per part
    counts = telemetry.take_action_counts()
    assert counts is not None and counts.tolist() == [5, 6, 7, 8]
    means = timings.means()
    assert means["timing/actor_inference_per_step"] == pytest.approx(timing[0])
    logger.close()


def test_a_multi_task_run_logs_the_frames_acted_on_each_level(tmp_path):
    """`frames/<level>`: each unroll's agent steps (its action counts' sum) times the frames
    per step, added to its own level only; a multi-task report compares each level against
    a single-task run at the same frames."""
    levels = ["VizdoomBasic-v1", "VizdoomDefendCenter-v1"]
    logger = RunLogger(tmp_path, console=False, tensorboard=False)
    telemetry = Telemetry(logger, Timings(), levels, frame_scale=4)
    timing = (0.001, 0.002, 0.0005)

    def unroll(level_id: int, counts: list[int]) -> dict:
        return {"type": "unroll", "actor": level_id, "level_id": level_id, "episodes": [],
                "timing": timing, "action_counts": counts}  # fmt: skip

    telemetry.consume([unroll(0, [100, 28]), unroll(1, [64, 64]), unroll(0, [0, 128])], 0)
    metrics = telemetry.level_metrics()
    assert metrics["frames/VizdoomBasic-v1"] == 2 * 128 * 4
    assert metrics["frames/VizdoomDefendCenter-v1"] == 128 * 4
    logger.close()
