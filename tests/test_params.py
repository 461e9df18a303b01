"""Versioned shared weights: publish in the learner, pull in actors (also across processes)."""

import sys

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from gazelle.backends.local.params import ParamStore, flatten

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import runtime_children

CTX = mp.get_context("spawn")


def test_pull_copies_only_newer_versions():
    torch.manual_seed(0)
    learner, actor = nn.Linear(3, 2), nn.Linear(3, 2)
    store = ParamStore(learner, CTX)
    assert store.pull(actor, -1) == -1  # nothing published yet: untouched
    store.publish(learner, version=4)
    assert store.pull(actor, -1) == 4
    assert torch.equal(actor.weight, learner.weight) and torch.equal(actor.bias, learner.bias)
    with torch.no_grad():
        actor.weight.zero_()
    assert store.pull(actor, 4) == 4  # same version: no copy
    assert torch.all(actor.weight == 0)


def test_buffers_travel_with_parameters():
    learner, actor = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    learner.running_mean.fill_(2.5)
    store = ParamStore(learner, CTX)
    store.publish(learner, 1)
    store.pull(actor, 0)
    assert torch.all(actor.running_mean == 2.5)


@pytest.mark.slow
def test_child_process_sees_published_weights():
    torch.manual_seed(1)
    learner = nn.Linear(4, 2)
    store = ParamStore(learner, CTX)
    store.publish(learner, version=9)
    results = CTX.Queue()
    p = CTX.Process(target=runtime_children.read_params, args=(store, nn.Linear(4, 2), results))
    p.start()
    version, weights = results.get(timeout=60)
    p.join(10)
    assert version == 9
    assert weights[0] == learner.weight.detach().tolist()


def test_a_reader_never_blocks_the_writer_and_never_keeps_a_torn_copy():
    """The sequence lock: while a publish is under way (odd sequence) a reader waits for it
    and keeps no copy; the writer waits for nobody."""
    import threading

    learner, actor = nn.Linear(3, 2), nn.Linear(3, 2)
    store = ParamStore(learner, CTX)
    store.publish(learner, 1)
    store.seq += 1  # as if a publish were half done
    done = []
    reader = threading.Thread(target=lambda: done.append(store.pull(actor, 0)))
    reader.start()
    reader.join(timeout=0.3)
    assert reader.is_alive() and not done  # it waits: the copy would be torn
    with torch.no_grad():
        learner.weight.fill_(3.0)
    # why: finish the half-done publish as the writer would (it never waits for a reader),
    # rather than undo it and publish anew: between an undo and a new publish the reader may
    # rightly copy version 1, which made this test depend on timing.
    store.flat.copy_(flatten(learner))
    store.version[0] = 2
    store.seq += 1
    reader.join(timeout=5)
    assert done == [2] and torch.all(actor.weight == 3.0)
