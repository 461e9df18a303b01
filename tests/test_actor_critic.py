"""Loss terms: values and autograd gradients against hand-derived closed forms.

The terms take log-probabilities and entropies per step; here they come from a softmax
policy (`gazelle.distributions` over one discrete action set), so the gradients in the
logits can be checked against the closed forms of the IMPALA and A3C seeds."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gazelle.actions import ActionSpec
from gazelle.distributions import ActionDistribution
from gazelle.losses import (
    a3c_loss,
    baseline_loss,
    clip_rewards,
    entropy_loss,
    impala_loss,
    logit_grad_norms,
    policy_gradient_loss,
    vtrace,
)

T, B, A = 5, 3, 4
SOFTMAX = ActionDistribution(ActionSpec.categorical(A))


def log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return SOFTMAX.log_prob(logits, actions)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    return SOFTMAX.entropy(logits)


def random_logits(seed: int, shape: tuple[int, ...] = (T, B, A)) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_(True)


def random_actions(seed: int, shape: tuple[int, ...] = (T, B)) -> torch.Tensor:
    return torch.randint(0, A, shape, generator=torch.Generator().manual_seed(seed))


def closed_form_entropy_grad(logits: torch.Tensor) -> torch.Tensor:
    """d/dz_j sum_a p_a log p_a = p_j (log p_j - sum_a p_a log p_a) = p_j (log p_j + H)."""
    p = torch.softmax(logits.detach(), -1)
    log_p = torch.log_softmax(logits.detach(), -1)
    entropy = -(p * log_p).sum(-1, keepdim=True)
    return p * (log_p + entropy)


def assert_metrics_detached_scalars(metrics: dict[str, torch.Tensor]) -> None:
    for name, value in metrics.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0, name
        assert not value.requires_grad, name


def test_policy_gradient_loss_value_and_gradient():
    logits, actions = random_logits(0), random_actions(0)
    advantages = torch.randn(T, B, dtype=torch.float64, requires_grad=True)
    loss, metrics = policy_gradient_loss(log_probs(logits, actions), advantages)
    log_p = torch.log_softmax(logits.detach(), -1)
    expected = -(log_p.gather(-1, actions[..., None])[..., 0] * advantages.detach()).sum()
    torch.testing.assert_close(loss.detach(), expected)
    loss.backward()
    onehot = F.one_hot(actions, A).to(torch.float64)
    grad = (torch.softmax(logits.detach(), -1) - onehot) * advantages.detach()[..., None]
    torch.testing.assert_close(logits.grad, grad)
    assert advantages.grad is None  # stop-gradient on the advantages
    assert_metrics_detached_scalars(metrics)
    torch.testing.assert_close(metrics["losses/policy"], expected)


def test_baseline_loss_value_and_gradient():
    generator = torch.Generator().manual_seed(1)
    vs = torch.randn(T, B, generator=generator, dtype=torch.float64)
    values = torch.randn(T, B, generator=generator, dtype=torch.float64, requires_grad=True)
    loss, metrics = baseline_loss(vs - values)
    torch.testing.assert_close(loss.detach(), 0.5 * ((vs - values.detach()) ** 2).sum())
    loss.backward()
    torch.testing.assert_close(values.grad, -(vs - values.detach()))
    assert_metrics_detached_scalars(metrics)
    assert set(metrics) == {"losses/baseline"}


def test_entropy_loss_value_and_gradient():
    logits = random_logits(2)
    loss, metrics = entropy_loss(entropy(logits))
    p = torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(loss.detach(), (p * torch.log(p)).sum())
    loss.backward()
    torch.testing.assert_close(logits.grad, closed_form_entropy_grad(logits))
    assert_metrics_detached_scalars(metrics)
    torch.testing.assert_close(metrics["policy/entropy"], -(p * torch.log(p)).sum(-1).mean())


def test_entropy_loss_of_uniform_policy_is_minus_log_a():
    loss, metrics = entropy_loss(entropy(torch.zeros(T, B, A)))
    torch.testing.assert_close(loss, torch.tensor(-T * B * math.log(A)))
    torch.testing.assert_close(metrics["policy/entropy"], torch.tensor(math.log(A)))


def random_vtrace(logits, actions, values, generator):
    """V-trace of `logits` against a random behaviour policy, rewards and bootstrap."""
    return vtrace.from_logits(
        behaviour_policy_logits=torch.randn(T, B, A, generator=generator, dtype=torch.float64),
        target_policy_logits=logits,
        actions=actions,
        discounts=torch.full((T, B), 0.9, dtype=torch.float64),
        rewards=torch.randn(T, B, generator=generator, dtype=torch.float64),
        values=values,
        bootstrap_value=torch.randn(B, generator=generator, dtype=torch.float64),
    )


def test_impala_loss_combines_terms_and_gradients():
    logits, actions = random_logits(3), random_actions(3)
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(T, B, generator=generator, dtype=torch.float64, requires_grad=True)
    returns = random_vtrace(logits, actions, values, generator)
    baseline_cost, entropy_cost = 0.7, 0.03
    total, metrics = impala_loss(
        log_probs(logits, actions),
        entropy(logits),
        values,
        returns,
        baseline_cost=baseline_cost,
        entropy_cost=entropy_cost,
    )
    expected = (
        metrics["losses/policy"]
        + baseline_cost * metrics["losses/baseline"]
        + entropy_cost * metrics["losses/entropy"]
    )
    torch.testing.assert_close(total.detach(), expected)
    torch.testing.assert_close(metrics["losses/total"], expected)
    torch.testing.assert_close(
        metrics["losses/baseline"], 0.5 * ((returns.vs - values.detach()) ** 2).sum()
    )
    total.backward()
    onehot = F.one_hot(actions, A).to(torch.float64)
    pg_grad = (torch.softmax(logits.detach(), -1) - onehot) * returns.pg_advantages[..., None]
    torch.testing.assert_close(
        logits.grad, pg_grad + entropy_cost * closed_form_entropy_grad(logits)
    )
    torch.testing.assert_close(values.grad, -baseline_cost * (returns.vs - values.detach()))
    assert_metrics_detached_scalars(metrics)
    assert {"losses/policy", "losses/baseline", "losses/entropy", "losses/total"} <= set(metrics)
    torch.testing.assert_close(metrics["vtrace/rho_mean"], returns.log_rhos.detach().exp().mean())
    log_rhos = returns.log_rhos.detach()
    assert float(metrics["vtrace/rho_above_1"]) == float((log_rhos.exp() > 1).double().mean())
    torch.testing.assert_close(metrics["vtrace/kl_behaviour_target"], -log_rhos.mean())


def test_the_kl_metric_estimates_the_kl_between_behaviour_and_target():
    """mean(-log rho) over actions sampled from mu approaches KL(mu || pi) (from the logits)."""
    torch.manual_seed(0)
    T, B, A = 200, 50, 4
    behaviour = torch.randn(T, B, A, dtype=torch.float64)
    target = behaviour + 0.5 * torch.randn(T, B, A, dtype=torch.float64)
    actions = torch.distributions.Categorical(logits=behaviour).sample()
    returns = vtrace.from_logits(
        behaviour, target, actions,
        torch.full((T, B), 0.99, dtype=torch.float64), torch.zeros(T, B, dtype=torch.float64),
        torch.zeros(T, B, dtype=torch.float64), torch.zeros(B, dtype=torch.float64),
    )  # fmt: skip
    zeros = torch.zeros(T, B, dtype=torch.float64)
    _, metrics = impala_loss(returns.target_action_log_probs, zeros, zeros, returns)
    mu, pi = torch.log_softmax(behaviour, -1), torch.log_softmax(target, -1)
    exact = (mu.exp() * (mu - pi)).sum(-1).mean()
    assert float(exact) > 0.05
    assert float(metrics["vtrace/kl_behaviour_target"]) == pytest.approx(float(exact), rel=0.05)


def seed_a3c_loss(logits, actions, advantages, returns, values):
    """The seed's graph with one-hot actions: pi + 0.5 * vf - 0.01 * entropy."""
    log_prob = torch.log_softmax(logits, -1)
    prob = torch.softmax(logits, -1)
    onehot = F.one_hot(actions, logits.shape[-1]).to(logits.dtype)
    pi_loss = -torch.sum(torch.sum(log_prob * onehot, -1) * advantages)
    vf_loss = 0.5 * torch.sum(torch.square(values - returns))
    entropy = -torch.sum(prob * log_prob)
    return pi_loss + 0.5 * vf_loss - entropy * 0.01


@pytest.mark.parametrize("shape", [(T,), (T, B)])
def test_a3c_loss_matches_seed(shape):
    generator = torch.Generator().manual_seed(4)
    logits = random_logits(4, (*shape, A))
    actions = random_actions(4, shape)
    advantages = torch.randn(shape, generator=generator, dtype=torch.float64)
    returns = torch.randn(shape, generator=generator, dtype=torch.float64)
    values = torch.randn(shape, generator=generator, dtype=torch.float64, requires_grad=True)
    total, metrics = a3c_loss(
        log_probs(logits, actions), entropy(logits), advantages, returns, values
    )
    reference = seed_a3c_loss(logits, actions, advantages, returns, values)
    torch.testing.assert_close(total, reference)
    grads = torch.autograd.grad(total, (logits, values))
    ref_grads = torch.autograd.grad(reference, (logits, values))
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad)
    assert_metrics_detached_scalars(metrics)
    torch.testing.assert_close(
        metrics["losses/baseline"], 0.5 * ((values.detach() - returns) ** 2).sum()
    )


def test_a3c_loss_coefficients_and_stop_gradients():
    logits, actions = random_logits(5, (T, A)), random_actions(5, (T,))
    advantages = torch.randn(T, dtype=torch.float64, requires_grad=True)
    returns = torch.randn(T, dtype=torch.float64, requires_grad=True)
    values = torch.randn(T, dtype=torch.float64, requires_grad=True)
    total, metrics = a3c_loss(
        log_probs(logits, actions), entropy(logits), advantages, returns, values,
        value_coef=2.0, entropy_coef=0.5,
    )  # fmt: skip
    expected = (
        metrics["losses/policy"]
        + 2.0 * metrics["losses/baseline"]
        + 0.5 * metrics["losses/entropy"]
    )
    torch.testing.assert_close(total.detach(), expected)
    total.backward()
    torch.testing.assert_close(values.grad, 2.0 * (values.detach() - returns.detach()))
    assert advantages.grad is None and returns.grad is None


def autograd_logit_grad_norms(logits, actions, advantages, entropy_coef):
    """The reference: autograd's gradients of each term in the logits, then their norms."""
    leaf = logits.detach().requires_grad_(True)
    pg_loss = policy_gradient_loss(log_probs(leaf, actions), advantages)[0]
    (pg_grad,) = torch.autograd.grad(pg_loss, leaf)
    (ent_grad,) = torch.autograd.grad(entropy_coef * entropy_loss(entropy(leaf))[0], leaf)
    return pg_grad.norm(), ent_grad.norm()


def test_logit_grad_norms_are_the_terms_gradient_norms():
    """The two closed-form norms equal those of autograd's gradients of the terms."""
    logits, actions = random_logits(6), random_actions(6)
    generator = torch.Generator().manual_seed(6)
    advantages = torch.randn(T, B, generator=generator, dtype=torch.float64)
    metrics = logit_grad_norms(logits, actions, advantages, 0.3)
    pg_norm, ent_norm = autograd_logit_grad_norms(logits, actions, advantages, 0.3)
    torch.testing.assert_close(metrics["policy/pg_logit_grad_norm"], pg_norm)
    torch.testing.assert_close(metrics["policy/entropy_logit_grad_norm"], ent_norm)
    assert_metrics_detached_scalars(metrics)


def test_logit_grad_norms_of_a_uniform_policy_and_zero_advantages():
    """Uniform: the entropy is at its top, so its gradient is zero; no advantage, no pull."""
    logits = torch.zeros(T, B, A, dtype=torch.float64)
    norms = logit_grad_norms(logits, random_actions(7), torch.zeros(T, B, dtype=torch.float64), 1.0)
    assert float(norms["policy/entropy_logit_grad_norm"]) == pytest.approx(0.0, abs=1e-12)
    assert float(norms["policy/pg_logit_grad_norm"]) == 0.0
    peaked = torch.tensor([[[5.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    one = logit_grad_norms(peaked, torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1), 0.5)
    assert float(one["policy/entropy_logit_grad_norm"]) > 0.0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("abs_one", [-1.0, -0.5, 0.0, 0.5, 1.0, 1.0]),
        # 5 tanh(r/5) for r >= 0, 1.5 tanh(r/5) for r < 0; tanh(1) = 0.76159415595576...,
        # tanh(0.1) = 0.09966799462495582, tanh(2) = 0.96402758007581...
        (
            "soft_asymmetric",
            [-1.1423912339336475, -0.14950199193743373, 0.0, 0.4983399731247791,
             3.8079707797788245, 4.820137900379085],
        ),
        ("none", [-5.0, -0.5, 0.0, 0.5, 5.0, 10.0]),
    ],
)  # fmt: skip
def test_clip_rewards(mode, expected):
    rewards = torch.tensor([-5.0, -0.5, 0.0, 0.5, 5.0, 10.0], dtype=torch.float64)
    out = clip_rewards(rewards, mode)
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))


def test_clip_rewards_unknown_mode():
    with pytest.raises(ValueError, match=r"'tanh'.*abs_one, soft_asymmetric, none"):
        clip_rewards(torch.zeros(3), "tanh")


def test_shape_errors_name_the_argument():
    logits, actions = random_logits(6), random_actions(6)
    taken = log_probs(logits, actions)
    with pytest.raises(ValueError, match=r"`advantages` has shape \[5\], expected \[5, 3\]"):
        policy_gradient_loss(taken, torch.zeros(T, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"`entropy` has shape \[5\], expected \[5, 3\]"):
        impala_loss(taken, entropy(logits)[:, 0], taken, random_vtrace(logits, actions, taken,
                    torch.Generator().manual_seed(0)))  # fmt: skip
    one = taken[:, 0]
    with pytest.raises(ValueError, match=r"`values` has shape \[5, 1\], expected \[5\]"):
        a3c_loss(one, one, torch.zeros(T), torch.zeros(T), torch.zeros(T, 1))
