"""The learner's wiring: the seed's shift by one, episode ends, truncation bootstrap, and one
update equal to a manual SGD step."""

import functools

import numpy as np
import pytest
import torch

from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.models import Agent
from gazelle.runtime.learner import Learner
from gazelle.types import ObsSpec

T, B, A, D = 6, 3, 2, 4


def loss_of(settings):
    return functools.partial(impala_loss, settings=settings)


SPEC = ObsSpec((D,), np.dtype(np.float32), num_actions=A)


def make_batch(agent, seed=0, terminated_at=(), truncated_at=()):
    """A [T+1, B] batch whose behaviour logits are the agent's own (on-policy)."""
    g = torch.Generator().manual_seed(seed)
    batch = {
        "frame": torch.randn(T + 1, B, D, generator=g),
        "action": torch.randint(0, A, (T + 1, B), generator=g),
        "reward": torch.randn(T + 1, B, generator=g).clamp(-1, 1),
        "terminated": torch.zeros(T + 1, B, dtype=torch.bool),
        "truncated": torch.zeros(T + 1, B, dtype=torch.bool),
        "truncation_value": torch.randn(T + 1, B, generator=g),
    }
    for t, b in terminated_at:
        batch["terminated"][t, b] = True
    for t, b in truncated_at:
        batch["truncated"][t, b] = True
    state = agent.initial_state(B)
    if state:
        batch["state_h"], batch["state_c"] = (s + 0.1 for s in state)
    with torch.no_grad():
        done = batch["terminated"] | batch["truncated"]
        out, _ = agent.unroll(
            {"frame": batch["frame"]},
            batch["action"],
            batch["reward"],
            done,
            tuple(batch[k] for k in ("state_h", "state_c") if k in batch),
        )
    # why: behaviour output at k led to o_k, so it is the agent's output at k-1.
    batch["policy_logits"] = torch.cat([torch.zeros(1, B, A), out.policy_logits[:-1]])
    batch["baseline"] = torch.cat([torch.zeros(1, B), out.baseline[:-1]])
    return batch, out


def reference_targets(batch, values, gamma):
    """n-step returns written from the seed's data layout, step by step (on-policy v-trace)."""
    vs = np.zeros((T, B))
    for b in range(B):
        target = values[T, b]
        for t in reversed(range(T)):
            k = t + 1  # env output that the action at t led to
            if batch["terminated"][k, b]:
                target = batch["reward"][k, b]
            elif batch["truncated"][k, b]:
                target = batch["reward"][k, b] + gamma * batch["truncation_value"][k, b]
            else:
                target = batch["reward"][k, b] + gamma * target
            vs[t, b] = target
    return vs


@pytest.mark.parametrize("use_lstm", [False, True])
def test_baseline_loss_uses_the_seed_shift_and_episode_ends(use_lstm):
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="mlp", use_lstm=use_lstm, core_size=8)
    batch, out = make_batch(agent, terminated_at=[(2, 0), (4, 1)], truncated_at=[(3, 2)])
    settings = LossSettings(0.9, baseline_cost=1.0, entropy_cost=0.0, reward_clipping="none")
    _, metrics = impala_loss(agent, batch, settings)
    values = out.baseline.detach().numpy()
    vs = reference_targets({k: v.numpy() for k, v in batch.items()}, values, 0.9)
    expected = 0.5 * np.sum((vs - values[:T]) ** 2)
    assert metrics["losses/baseline"].item() == pytest.approx(expected, rel=1e-4)


def test_one_update_equals_a_manual_sgd_step():
    torch.manual_seed(1)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8)
    batch, _ = make_batch(agent, terminated_at=[(3, 1)])
    settings = LossSettings(0.99, 0.5, 0.01, "abs_one")
    manual = {n: p.detach().clone() for n, p in agent.named_parameters()}
    loss, _ = impala_loss(agent, batch, settings)
    grads = torch.autograd.grad(loss, list(agent.parameters()))
    expected = {n: manual[n] - 0.05 * g for (n, _), g in zip(agent.named_parameters(), grads)}
    learner = Learner(
        agent, torch.optim.SGD(agent.parameters(), lr=1.0), loss_of(settings), torch.device("cpu")
    )
    learner.step(batch, learning_rate=0.05)  # the schedule's rate overrides the optimiser's
    for name, param in agent.named_parameters():
        torch.testing.assert_close(param.detach(), expected[name], rtol=1e-5, atol=1e-6)


def test_grad_norm_clip_bounds_the_update():
    torch.manual_seed(2)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    batch, _ = make_batch(agent)
    batch["reward"] *= 100
    before = [p.detach().clone() for p in agent.parameters()]
    settings = LossSettings(0.99, 0.5, 0.0, "none")
    sgd = torch.optim.SGD(agent.parameters(), lr=1.0)
    learner = Learner(agent, sgd, loss_of(settings), torch.device("cpu"), grad_norm_clip=0.1)
    metrics = learner.step(batch, learning_rate=1.0)
    step = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(agent.parameters(), before)])
    assert metrics["losses/grad_norm"].item() > 0.1
    assert step.norm().item() == pytest.approx(0.1, rel=1e-3)


def test_bf16_learner_step_runs_and_changes_weights():
    torch.manual_seed(3)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8)
    batch, _ = make_batch(agent)
    before = [p.detach().clone() for p in agent.parameters()]
    settings = LossSettings(0.99, 0.5, 0.01, "abs_one")
    learner = Learner(
        agent,
        torch.optim.SGD(agent.parameters(), lr=0.1),
        loss_of(settings),
        torch.device("cpu"),
        precision="bf16",
        grad_norm_clip=40.0,
    )
    metrics = learner.step(batch, 0.1)
    assert torch.isfinite(metrics["losses/total"])
    assert any(not torch.equal(p, b) for p, b in zip(agent.parameters(), before))
