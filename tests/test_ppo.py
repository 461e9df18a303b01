"""The clipped surrogate loss against a slow reference written from the PPO paper's formula
(eq. 7), plus its properties: at ratio 1 its gradient is the policy gradient; where the
clip binds a step contributes no gradient."""

from __future__ import annotations

import math

import pytest
import torch

from gazelle.actions import ActionSpec
from gazelle.distributions import ActionDistribution
from gazelle.losses import ppo
from gazelle.losses.actor_critic import policy_gradient_loss


def clipped_surrogate_loss(target, behaviour, actions, advantages, clip):
    """The loss on the log-probabilities of a softmax policy given by logits `[T, B, A]`."""
    softmax = ActionDistribution(ActionSpec.categorical(target.shape[-1]))
    return ppo.clipped_surrogate_loss(
        softmax.log_prob(target, actions), softmax.log_prob(behaviour, actions), advantages, clip
    )


def softmax_prob(row, action: int) -> float:
    values = [float(x) for x in row]
    top = max(values)
    exps = [math.exp(x - top) for x in values]
    return exps[action] / sum(exps)


def reference(target, behaviour, actions, advantages, clip) -> float:
    """sum_t -min(r_t A_t, clip(r_t, 1-e, 1+e) A_t), one step at a time in Python floats."""
    total = 0.0
    T, B, _ = target.shape
    for t in range(T):
        for b in range(B):
            a = int(actions[t, b])
            r = softmax_prob(target[t, b], a) / softmax_prob(behaviour[t, b], a)
            adv = float(advantages[t, b])
            total += -min(r * adv, min(max(r, 1 - clip), 1 + clip) * adv)
    return total


def batch(seed: int, T: int = 5, B: int = 3, A: int = 4, spread: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.randn(T, B, A, generator=g, dtype=torch.float64)
    target = behaviour + spread * torch.randn(T, B, A, generator=g, dtype=torch.float64)
    actions = torch.randint(0, A, (T, B), generator=g)
    advantages = torch.randn(T, B, generator=g, dtype=torch.float64)
    return target, behaviour, actions, advantages


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [0.1, 0.3])
def test_matches_the_papers_formula(seed, clip):
    target, behaviour, actions, advantages = batch(seed)
    loss, metrics = clipped_surrogate_loss(target, behaviour, actions, advantages, clip)
    assert float(loss) == pytest.approx(reference(target, behaviour, actions, advantages, clip))
    assert 0.0 < float(metrics["ppo/clip_fraction"]) < 1.0  # spread 1: some steps clip
    assert float(metrics["ppo/approx_kl"]) >= 0.0


def test_at_ratio_one_its_gradient_is_the_policy_gradient():
    """pi = mu: -grad(r A) = -A grad log pi, the plain policy-gradient loss' gradient."""
    _, behaviour, actions, advantages = batch(3)
    target = behaviour.clone().requires_grad_(True)
    loss, metrics = clipped_surrogate_loss(target, behaviour, actions, advantages, 0.2)
    (grad,) = torch.autograd.grad(loss, target)
    same = behaviour.clone().requires_grad_(True)
    softmax = ActionDistribution(ActionSpec.categorical(same.shape[-1]))
    pg, _ = policy_gradient_loss(softmax.log_prob(same, actions), advantages)
    (pg_grad,) = torch.autograd.grad(pg, same)
    torch.testing.assert_close(grad, pg_grad)
    assert float(metrics["ppo/clip_fraction"]) == 0.0 and float(metrics["ppo/ratio_mean"]) == 1.0


def test_where_the_clip_binds_a_step_has_no_gradient():
    """r > 1 + e with A > 0 and r < 1 - e with A < 0: zero gradient; the other sides of the
    clip keep theirs (the min takes the unclipped, pessimistic term)."""
    behaviour = torch.zeros(4, 1, 2, dtype=torch.float64)
    actions = torch.zeros(4, 1, dtype=torch.long)
    # pi(a=0) = sigmoid(x): ratios 2*sigmoid(x) of 1.8, 1.8, 0.2, 0.2 against mu(a=0) = 0.5
    x = torch.tensor([2.2, 2.2, -2.2, -2.2], dtype=torch.float64)
    target = torch.stack([x, torch.zeros(4, dtype=torch.float64)], -1).unsqueeze(1)
    target.requires_grad_(True)
    advantages = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]], dtype=torch.float64)
    loss, _ = clipped_surrogate_loss(target, behaviour, actions, advantages, 0.2)
    (grad,) = torch.autograd.grad(loss, target)
    bound = grad[:, 0].abs().sum(-1)
    assert bound[0] == 0.0 and bound[3] == 0.0  # clip binds: r high & A > 0, r low & A < 0
    assert bound[1] > 0.0 and bound[2] > 0.0  # pessimistic side: the unclipped term acts


def test_bad_input_names_the_argument():
    target, behaviour, actions, advantages = batch(0)
    with pytest.raises(ValueError, match="advantages"):
        clipped_surrogate_loss(target, behaviour, actions, advantages[:2], 0.2)
    with pytest.raises(ValueError, match="clip must be > 0"):
        clipped_surrogate_loss(target, behaviour, actions, advantages, 0.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_weights_scale_each_steps_term(seed):
    """Decoupled PPO's weights: `sum_t -w_t min(r_t A_t, clip(r_t) A_t)`, step by step; with
    every weight 1 it is the plain loss."""
    target, behaviour, actions, advantages = batch(seed)
    softmax = ActionDistribution(ActionSpec.categorical(target.shape[-1]))
    weights = torch.rand(advantages.shape, generator=torch.Generator().manual_seed(seed + 7),
                         dtype=torch.float64)  # fmt: skip
    got, _ = ppo.clipped_surrogate_loss(
        softmax.log_prob(target, actions), softmax.log_prob(behaviour, actions), advantages,
        0.2, weights,
    )  # fmt: skip
    want = 0.0
    for t in range(target.shape[0]):
        for b in range(target.shape[1]):
            one = (slice(t, t + 1), slice(b, b + 1))
            term = reference(target[one], behaviour[one], actions[one], advantages[one], 0.2)
            want += float(weights[t, b]) * term
    assert float(got) == pytest.approx(want)
    ones, _ = ppo.clipped_surrogate_loss(
        softmax.log_prob(target, actions), softmax.log_prob(behaviour, actions), advantages,
        0.2, torch.ones_like(weights),
    )  # fmt: skip
    plain, _ = clipped_surrogate_loss(target, behaviour, actions, advantages, 0.2)
    assert float(ones) == pytest.approx(float(plain))
