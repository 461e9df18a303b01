"""The Ray fleet's hand-over between its pump thread and the learner (`UnrollQueue`), without
Ray: slot counts, batches assembled time-major from per-env unrolls, and how it stops."""

import threading

import numpy as np
import pytest
import torch

from gazelle.backends.ray.unrolls import UnrollQueue

T, H = 3, 2


def result(actor_id: int, envs: int, version: int, base: float) -> dict:
    """One actor call's result for `envs` envs: frame values `base + 10 * env + t`."""
    frame = base + 10 * np.arange(envs)[None, :] + np.arange(T + 1)[:, None]  # [T+1, envs]
    return {
        "data": {
            "frame": frame.astype(np.float32),
            "state_h": np.full((envs, H), base, np.float32),
        },
        "meta": {"actor_id": actor_id, "policy_version": version, "level_id": 0},
        "events": [{"type": "unroll", "actor": actor_id}],
    }


def make_queue(actors: int = 2) -> UnrollQueue:
    return UnrollQueue(actors, lambda r: r["meta"]["actor_id"])


def test_slots_are_held_per_call_and_freed_per_env_unroll_taken():
    queue = make_queue()
    assert queue.has_room(0, envs=2, calls=2)
    queue.hold(0, 2)
    queue.hold(0, 2)
    assert not queue.has_room(0, envs=2, calls=2)  # 2 calls of 2 envs: full
    assert queue.has_room(1, envs=2, calls=2)  # the other actor's slots are its own
    queue.put(result(0, 2, version=5, base=0.0), envs=2)
    next(queue.batches(1, timeout=1.0, should_stop=lambda: False))
    assert queue.has_room(0, envs=2, calls=2) is False  # one env's slot back: 3 of 4 held
    next(queue.batches(1, timeout=1.0, should_stop=lambda: False))
    assert queue.has_room(0, envs=2, calls=2)  # the whole call's slots back


def test_batches_are_time_major_with_state_and_metadata_per_env():
    queue = make_queue()
    queue.put(result(0, 2, version=5, base=0.0), envs=2)
    queue.put(result(1, 1, version=7, base=100.0), envs=1)
    batch = next(queue.batches(3, timeout=1.0, should_stop=lambda: False))
    assert batch["frame"].shape == (T + 1, 3)
    # column b is env unroll b in arrival order: actor 0's envs 0 and 1, then actor 1's env 0
    expected = torch.tensor([[0.0, 10.0, 100.0]]) + torch.arange(T + 1.0)[:, None]
    torch.testing.assert_close(batch["frame"], expected)
    torch.testing.assert_close(batch["state_h"], torch.tensor([[0.0] * H, [0.0] * H, [100.0] * H]))
    assert batch["policy_version"].tolist() == [5, 5, 7]
    assert batch["policy_version"].dtype == torch.int64
    assert batch["actor_id"].tolist() == [0, 0, 1]
    assert batch["level_id"].dtype == torch.int32


def test_events_are_kept_until_taken_once():
    queue = make_queue()
    queue.put(result(1, 1, version=0, base=0.0), envs=1)
    queue.add_events({"type": "actor_hung", "actor": 0}, None)
    assert [e["type"] for e in queue.take_events()] == ["unroll", "actor_hung"]
    assert queue.take_events() == []


def test_dropped_calls_free_their_slots_and_are_counted():
    queue = make_queue()
    queue.hold(1, 4)
    queue.hold(1, 4)
    queue.drop(1, 8)
    assert queue.dropped_slots == 8
    assert queue.has_room(1, envs=4, calls=2)


def test_no_unroll_in_time_is_a_timeout_naming_it():
    queue = make_queue()
    with pytest.raises(TimeoutError, match="no unroll from any actor in 0s"):
        next(queue.batches(1, timeout=0.2, should_stop=lambda: False))


def test_a_waiting_learner_stops_when_the_pump_fails_or_the_run_stops():
    queue = make_queue()
    waited: list[list] = []
    thread = threading.Thread(
        target=lambda: waited.append(list(queue.batches(1, 30.0, lambda: False)))
    )
    thread.start()
    queue.fail(RuntimeError("pump died"))
    thread.join(timeout=5.0)
    assert not thread.is_alive() and waited == [[]]
    assert isinstance(queue.error, RuntimeError)
    assert list(make_queue().batches(1, 30.0, should_stop=lambda: True)) == []
