"""`--learners N`: two learner processes (gloo on loopback, spawned) with half the batch each
take the same optimiser steps as one learner with the whole batch, for IMPALA's V-trace and
for APPO's passes (minibatches, normalised advantages, PopArt, the learner's anchor,
observation statistics); a learner that stops answering ends the step within the timeout,
naming itself; and the checks of the flag."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

import gazelle.algorithms.appo.loop as appo_loop
from gazelle.algorithms.common import prepare
from gazelle.algorithms.impala import ranks
from gazelle.algorithms.impala.build import make_learner, new_agent, vtrace_loss
from gazelle.algorithms.impala.passes import train_on_batch
from gazelle.config import Config

T, B = 5, 8


def resolved(tmp_path, **flags):
    """A resolved CartPole config (one actor: no layout measurement)."""
    values = {"env": "CartPole-v1", "num_actors": 1, "batch_size": B, "unroll_length": T}
    values.update(logdir=str(tmp_path), device="cpu", learners=2, **flags)
    config, found, _ = prepare(Config.from_flat(values))
    return config, found


def make_batch(agent, seed):
    """A `[T+1, B]` batch of the agent's observation fields, actions, rewards and ends,
    with behaviour logits near the agent's (off-policy enough for V-trace's clipping)."""
    g = torch.Generator().manual_seed(seed)
    spec = agent.obs_spec
    batch = {
        name: torch.randn(T + 1, B, *spec.field(name).shape, generator=g) for name in spec.names
    }
    actions = spec.num_actions
    batch.update(
        action=torch.randint(0, actions, (T + 1, B), generator=g),
        reward=torch.randn(T + 1, B, generator=g),
        terminated=torch.rand(T + 1, B, generator=g) < 0.1,
        truncated=torch.rand(T + 1, B, generator=g) < 0.05,
        truncation_value=torch.randn(T + 1, B, generator=g),
        policy_logits=torch.randn(T + 1, B, actions, generator=g) * 0.3,
        policy_version=torch.zeros(B, dtype=torch.int64),
        level_id=torch.zeros(B, dtype=torch.int64),
    )
    state = agent.initial_state(B)
    if state:
        batch["state_h"], batch["state_c"] = (torch.randn(s.shape, generator=g) for s in state)
    return batch


def view(config, learner):
    """What `train_on_batch` reads of a run."""
    section = config.algorithm
    epochs, minibatches = getattr(section, "epochs", None), getattr(section, "minibatches", None)
    anchor = getattr(section, "clip_anchor", None) == "learner"
    return SimpleNamespace(
        learner=learner, passes=(epochs or 1, minibatches or 1), anchor_at_learner=anchor
    )


def _make_loss(config):
    return appo_loop.make_loss if config.algo == "appo" else vtrace_loss


CASES = {
    "impala-vtrace-lstm": {"algo": "impala", "use_lstm": True, "grad_norm_clip": 0.5},
    "appo-passes": {
        "algo": "appo", "epochs": 2, "minibatches": 2, "normalize_advantages": True,
        "popart": True, "clip_anchor": "learner", "normalize_obs": True, "use_lstm": False,
    },
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_two_learners_with_half_the_batch_each_step_as_one_learner_with_all(tmp_path, case):
    config, found = resolved(tmp_path, learner_timeout_s=20.0, **CASES[case])
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    one_agent = new_agent(config, found.obs_spec, 1, cpu)
    one = view(config, make_learner(config, one_agent, cpu, make_loss=_make_loss(config)))
    two_agent = copy.deepcopy(one_agent)
    start = copy.deepcopy(one_agent.state_dict())
    learners = ranks.start(config, found, cpu, make_loss=_make_loss(config))
    try:
        collective = learners.collective
        two_learner = make_learner(config, two_agent, cpu, None, _make_loss(config), collective)
        two = view(config, two_learner)
        # why: a second learner that starts from other weights would be caught here too.
        ranks.send_start(collective, two_agent, two_learner.optimizer)
        for k in range(3):
            batch = make_batch(one_agent, seed=k)
            torch.manual_seed(100 + k)  # why: the same deal of APPO's minibatches
            want = train_on_batch(one, batch, 0.01)
            torch.manual_seed(100 + k)
            got = train_on_batch(two, batch, 0.01)
            assert float(got["learner/skipped"]) == float(want["learner/skipped"]) == 0.0
            torch.testing.assert_close(got["losses/grad_norm"], want["losses/grad_norm"])
        want_state, got_state = one_agent.state_dict(), two_agent.state_dict()
        for name, value in want_state.items():
            torch.testing.assert_close(got_state[name], value, rtol=1e-5, atol=1e-6)
        # the steps moved every weight (an equality of two unchanged agents proves nothing)
        assert all(
            not torch.equal(want_state[n], start[n]) for n, _ in one_agent.named_parameters()
        )
    finally:
        learners.close()
        torch.set_num_threads(threads)
