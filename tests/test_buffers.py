"""Shared-memory unroll slots across real processes, including an actor dying mid-write."""

import sys

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.backends.local.buffers import FREE, READY, WRITING, SlotLayout, UnrollBuffers
from gazelle.types import ObsSpec

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import runtime_children

CTX = mp.get_context("spawn")


def make_buffers(num_actors=2, slots_per_actor=2, state_size=4):
    spec = ObsSpec((4, 8, 8), np.dtype(np.uint8), num_actions=3, has_instruction=True)
    layout = SlotLayout(unroll_length=5, obs_spec=spec, state_size=state_size)
    return UnrollBuffers(layout, num_actors, slots_per_actor, CTX)


def test_layout_shapes_are_time_major_per_slot():
    buffers = make_buffers()
    assert buffers.data["frame"].shape == (6, 4, 4, 8, 8)
    assert buffers.data["frame"].dtype == torch.uint8
    assert buffers.data["policy_logits"].shape == (6, 4, 3)
    assert buffers.data["instruction"].shape == (6, 4, 32)
    assert buffers.data["state_h"].shape == (4, 4)
    assert "state_h" not in make_buffers(state_size=0).data


def test_gather_is_time_major_and_keeps_slot_contents():
    buffers = make_buffers()
    for slot in range(4):
        for t in range(6):
            buffers.write_step(torch.tensor([slot]), t, {"reward": torch.tensor([t + 10.0 * slot])})
        buffers.write_state(
            torch.tensor([slot]), (torch.full((1, 4), float(slot)), torch.zeros(1, 4))
        )
    batch = buffers.gather([3, 1])
    assert batch["reward"].shape == (6, 2)
    assert batch["reward"][:, 0].tolist() == [30, 31, 32, 33, 34, 35]
    assert batch["reward"][:, 1].tolist() == [10, 11, 12, 13, 14, 15]
    assert batch["reward"].is_contiguous()
    assert batch["state_h"][:, 0].tolist() == [3, 1]


@pytest.mark.slow
def test_slots_written_by_another_process_reach_the_learner():
    buffers = make_buffers()
    writer = buffers.open_channel(1)
    p = CTX.Process(target=runtime_children.write_slots, args=(buffers, writer, 1, 7, False))
    p.start()
    writer.close()
    p.join(30)
    assert p.exitcode == 0
    slots = buffers.take(2, timeout=10)
    assert sorted(slots) == [2, 3]  # actor 1 owns slots 2 and 3
    batch = buffers.gather(slots)
    assert torch.all(batch["reward"] == 7)
    assert batch["policy_version"].tolist() == [7, 7]
    buffers.release(slots)
    assert buffers.state.tolist() == [FREE] * 4


@pytest.mark.slow
def test_actor_dying_mid_write_never_hands_its_slot_to_the_learner():
    buffers = make_buffers()
    writer = buffers.open_channel(0)
    p = CTX.Process(target=runtime_children.write_slots, args=(buffers, writer, 0, 5, True))
    p.start()
    writer.close()
    p.join(30)
    assert p.exitcode == 9
    assert buffers.state[:2].tolist() == [WRITING, WRITING]
    assert buffers.release_actor(0) == 2
    assert buffers.state[:2].tolist() == [FREE, FREE]
    with pytest.raises(TimeoutError):
        buffers.take(1, timeout=0.5)
    # The restarted actor gets the same slots back and its unroll goes through.
    writer = buffers.open_channel(0)
    p = CTX.Process(target=runtime_children.write_slots, args=(buffers, writer, 0, 6, False))
    p.start()
    writer.close()
    p.join(30)
    slots = buffers.take(2, timeout=10)
    assert torch.all(buffers.gather(slots)["reward"] == 6)


def attached(buffers, actor_id=0):
    buffers.attach(buffers.open_channel(actor_id))
    return buffers


def test_a_dead_actors_ready_slots_reach_the_learner_exactly_once():
    buffers = attached(make_buffers())
    slots = buffers.acquire(0, 2, timeout=1, should_stop=lambda: False)
    buffers.commit(slots, 0, 0, 1)  # their indices are now in actor 0's pipe
    # the actor dies: its pipe is closed with the indices in it, its READY slots re-queued
    assert buffers.release_actor(0) == 0
    taken = buffers.take(2, timeout=5)
    assert sorted(taken) == sorted(slots)
    buffers.release(taken)
    with pytest.raises(TimeoutError):
        buffers.take(1, timeout=1.5)  # no duplicate anywhere
    assert buffers.state[:2].tolist() == [FREE, FREE]


def test_a_slot_no_longer_ready_is_skipped():
    buffers = attached(make_buffers())
    slots = buffers.acquire(0, 2, timeout=1, should_stop=lambda: False)
    buffers.commit(slots, 0, 0, 1)
    buffers.release([slots[0]])  # e.g. freed by a supervisor after its index was sent
    assert buffers.take(1, timeout=5) == [slots[1]]
    with pytest.raises(TimeoutError):
        buffers.take(1, timeout=1.0)


def test_commit_without_a_pipe_is_a_clear_error():
    buffers = make_buffers()
    slots = buffers.acquire(0, 1, timeout=1, should_stop=lambda: False)
    with pytest.raises(RuntimeError, match="attach"):
        buffers.commit(slots, 0, 0, 1)


def test_acquire_waits_for_the_learner_and_respects_stop():
    buffers = attached(make_buffers())
    first = buffers.acquire(0, 2, timeout=1, should_stop=lambda: False)
    assert buffers.state[first].tolist() == [WRITING, WRITING]
    with pytest.raises(TimeoutError):
        buffers.acquire(0, 1, timeout=0.05, should_stop=lambda: False)
    assert buffers.acquire(0, 1, timeout=5, should_stop=lambda: True) == []
    buffers.commit(first, 0, 0, 0)
    assert buffers.state[first].tolist() == [READY, READY]


def test_take_and_the_prefetch_thread_end_when_told_to_stop():
    from gazelle.runtime.learner import Prefetcher

    buffers = make_buffers()
    assert buffers.take(1, timeout=30, should_stop=lambda: True) == []
    prefetcher = Prefetcher(lambda stop: buffers.batches(1, 30.0, stop), torch.device("cpu"))
    prefetcher.close()
    prefetcher._thread.join(timeout=3)
    assert not prefetcher._thread.is_alive()
