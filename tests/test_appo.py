"""APPO: its loss against IMPALA's where they must agree (on-policy, nothing clipped, no
normalisation, lambda 1: the same gradient), the advantages it normalises against targets
written out step by step, the passes over a batch, and its config."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import pytest
import torch

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.loop import train_on_batch
from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.config import Config, ConfigError, validate
from gazelle.models import Agent
from test_learner import SPEC, make_batch, reference_targets

GAMMA = 0.9


def grads(agent, loss_fn, batch):
    agent.zero_grad()
    loss, metrics = loss_fn(agent, batch)
    loss.backward()
    return [p.grad.clone() for p in agent.parameters()], metrics


@pytest.mark.parametrize("use_lstm", [False, True])
def test_on_policy_without_clip_or_normalisation_its_gradient_is_impalas(use_lstm):
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=use_lstm)
    batch, _ = make_batch(agent, seed=1, terminated_at=[(3, 0)], truncated_at=[(4, 2)])
    settings = LossSettings(GAMMA, 0.5, 0.01, "none", vtrace_lambda=1.0)
    appo = functools.partial(
        appo_loss, settings=AppoSettings(settings, clip_ratio=1e6, normalize_advantages=False)
    )
    expected, _ = grads(agent, functools.partial(impala_loss, settings=settings), batch)
    got, metrics = grads(agent, appo, batch)
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6)
    assert float(metrics["ppo/clip_fraction"]) == 0.0
    assert float(metrics["ppo/ratio_mean"]) == pytest.approx(1.0)


def step_by_step_advantages(agent, batch, out):
    """r_t + gamma v_{t+1} - V(x_t) `[T, B]`, from on-policy targets written out by hand
    (`reference_targets`), and the gradient in the logits of the policy term weighted by
    them once scaled to mean 0, std 1 (-A_norm * grad log pi)."""
    from gazelle.losses.actor_critic import policy_gradient_loss

    values = out.baseline.detach().numpy()
    vs = torch.tensor(reference_targets(batch, values, GAMMA), dtype=torch.float32)
    T = vs.shape[0]
    discounts = GAMMA * (~(batch["terminated"][1:] | batch["truncated"][1:])).float()
    next_vs = torch.cat([vs[1:], out.baseline[T].detach().unsqueeze(0)])
    advantages = batch["reward"][1:] + discounts * next_vs - out.baseline[:T].detach()
    normalised = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    logits = out.policy_logits[:T].detach().clone().requires_grad_(True)
    pg, _ = policy_gradient_loss(
        agent.distribution.log_prob(logits, batch["action"][1:]), normalised
    )
    (want,) = torch.autograd.grad(pg, logits)
    return advantages, want


def grad_in_logits(agent, loss_fn, batch):
    """The gradient of `loss_fn(agent, batch)` in the agent's policy logits `[T+1, B, A]`,
    and the loss's metrics."""
    captured = {}
    real_unroll = agent.unroll

    def unroll(*args, **kwargs):
        result, state = real_unroll(*args, **kwargs)
        result.policy_logits.retain_grad()
        captured["logits"] = result.policy_logits
        return result, state

    agent.unroll = unroll
    try:
        agent.zero_grad()
        loss, metrics = loss_fn(agent, batch)
        loss.backward()
    finally:
        agent.unroll = real_unroll
    return captured["logits"].grad, metrics


def test_normalised_advantages_are_the_step_by_step_targets_scaled():
    """The policy term's gradient in the logits is -A_norm * grad log pi, where A_norm
    normalises r_t + gamma v_{t+1} - V(x_t) built from targets written out by hand."""
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, out = make_batch(agent, seed=2, terminated_at=[(2, 1)])
    settings = AppoSettings(LossSettings(GAMMA, 0.0, 0.0, "none", 1.0), 1e6, True)
    advantages, want = step_by_step_advantages(agent, batch, out)
    got, metrics = grad_in_logits(agent, functools.partial(appo_loss, settings=settings), batch)
    torch.testing.assert_close(got[: len(want)], want, rtol=1e-4, atol=1e-6)
    assert float(metrics["appo/advantage_mean"]) == pytest.approx(float(advantages.mean()), 1e-4)
    assert float(metrics["appo/advantage_std"]) == pytest.approx(float(advantages.std()), 1e-4)
    # on-policy with the clip out of reach, the policy term's gradient in the logits is the
    # closed form the metric reports (the steps past the unroll's end carry none)
    assert float(metrics["policy/pg_logit_grad_norm"]) == pytest.approx(
        float(torch.linalg.vector_norm(got)), rel=1e-4
    )
    assert float(metrics["policy/entropy_logit_grad_norm"]) == 0.0  # entropy_cost 0


class CountingLearner:
    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def step(self, batch, learning_rate):
        self.seen.append(sorted(int(i) for i in batch["actor_id"]))
        return {"losses/total": torch.tensor(float(len(self.seen))), "learner/skipped": 0.0}


def test_each_epoch_steps_once_on_each_of_its_disjoint_shares_of_the_batch():
    learner = CountingLearner()
    run = SimpleNamespace(passes=(3, 2), learner=learner)
    batch = {
        "actor_id": torch.arange(8, dtype=torch.int32),
        "policy_version": torch.zeros(8, dtype=torch.int64),
        "frame": torch.zeros(5, 8, 2),
    }
    metrics = train_on_batch(run, batch, 0.001)
    assert len(learner.seen) == 6  # epochs x minibatches optimiser steps
    for epoch in range(3):
        first, second = learner.seen[2 * epoch], learner.seen[2 * epoch + 1]
        assert len(first) == len(second) == 4 and sorted(first + second) == list(range(8))
    assert float(metrics["losses/total"]) == pytest.approx(3.5)  # the mean over the steps
    assert metrics["learner/skipped"] == 0.0


def test_one_pass_is_one_learner_step_on_the_whole_batch():
    learner = CountingLearner()
    batch = {"actor_id": torch.arange(4), "policy_version": torch.zeros(4, dtype=torch.int64)}
    train_on_batch(SimpleNamespace(passes=(1, 1), learner=learner), batch, 0.001)
    assert learner.seen == [[0, 1, 2, 3]]


def test_appo_config_resolves_from_its_preset_and_checks_the_minibatches():
    from gazelle.algorithms.common import prepare

    config, _, _ = prepare(Config.of(algo="appo", env="CartPole-v1", num_actors=1))
    appo = config.appo
    assert (appo.epochs, appo.minibatches, appo.clip_ratio) == (2, 2, 0.1)
    assert appo.normalize_advantages is True and appo.vtrace_lambda == 0.95
    impala, _, _ = prepare(Config.of(env="CartPole-v1", num_actors=1))
    assert impala.impala.vtrace_lambda == 1.0  # the seed's V-trace stays IMPALA's
    with pytest.raises(ConfigError, match=r"--minibatches: invalid value 3; allowed: a divisor"):
        validate(Config.of(algo="appo", env="CartPole-v1", batch_size=8, minibatches=3))
    with pytest.raises(ConfigError, match="not a setting of --algo impala"):
        Config.of(env="CartPole-v1", epochs=2)


def test_impala_with_normalised_advantages_scales_the_vtrace_advantages_of_the_batch():
    """`--normalize-advantages` on IMPALA: the policy term's gradient in the logits is
    -A_norm * grad log pi, A_norm the V-trace advantages (on-policy, lambda 1: written out
    step by step) scaled to mean 0, std 1."""
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, out = make_batch(agent, seed=3, terminated_at=[(2, 1)])
    _, want = step_by_step_advantages(agent, batch, out)
    T = len(want)
    seed_way, scaled = (LossSettings(GAMMA, 0.0, 0.0, "none", 1.0, flag) for flag in (0, 1))
    got, _ = grad_in_logits(agent, functools.partial(impala_loss, settings=scaled), batch)
    torch.testing.assert_close(got[:T], want, rtol=1e-4, atol=1e-6)
    # Without it, the seed's unscaled advantages: 10x the rewards, ~10x the gradient.
    batch["reward"] = batch["reward"] * 10.0
    sizes = [
        float(grad_in_logits(agent, functools.partial(impala_loss, settings=x), batch)[0][:T]
              .abs().sum())
        for x in (seed_way, scaled)
    ]  # fmt: skip
    assert sizes[0] > 5 * float(want.abs().sum()) and sizes[1] < 2 * float(want.abs().sum())


def test_impala_keeps_the_seeds_advantages_unless_asked():
    from gazelle.algorithms.common import prepare

    impala, _, _ = prepare(Config.of(env="CartPole-v1", num_actors=1))
    assert impala.impala.normalize_advantages is False
    asked, _, _ = prepare(Config.of(env="CartPole-v1", num_actors=1, normalize_advantages=True))
    assert asked.impala.normalize_advantages is True


def test_a_reward_scale_is_the_same_loss_as_rewards_scaled_by_hand():
    """`--reward-scale s` (before clipping): IMPALA's loss on rewards r equals the loss on
    rewards s * r with scale 1, and differs from the unscaled one (an agent that does not
    read the last reward, so that only the loss sees the rewards)."""
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False, last_action_reward=False)
    batch, _ = make_batch(agent, seed=4, terminated_at=[(2, 1)])
    scaled = LossSettings(GAMMA, 0.5, 0.01, "abs_one", 1.0, reward_scale=0.25)
    by_hand = {**batch, "reward": batch["reward"] * 0.25}
    got, _ = impala_loss(agent, batch, scaled)
    want, _ = impala_loss(agent, by_hand, LossSettings(GAMMA, 0.5, 0.01, "abs_one", 1.0))
    unscaled, _ = impala_loss(agent, batch, LossSettings(GAMMA, 0.5, 0.01, "abs_one", 1.0))
    torch.testing.assert_close(got, want)
    assert abs(got.item() - unscaled.item()) > 1e-3
    with pytest.raises(ConfigError, match=r"--reward-scale: invalid value 0"):
        validate(Config.of(env="CartPole-v1", reward_scale=0))


def test_both_losses_report_the_values_explained_variance():
    """`value/explained_variance` is `1 - var(vs - V) / var(vs)` of the V-trace targets and
    the learner's values (a slow reference from both), the same in IMPALA's and APPO's loss."""
    from gazelle.algorithms.impala.loss import learner_view

    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, _ = make_batch(agent, seed=5, terminated_at=[(2, 1)])
    settings = LossSettings(GAMMA, 0.5, 0.01, "abs_one", 1.0)
    view = learner_view(agent, batch, settings)
    vs = view.vtrace().vs
    residual, target = (vs - view.values).flatten().tolist(), vs.flatten().tolist()

    def var(xs):
        mean = sum(xs) / len(xs)
        return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)

    want = 1.0 - var(residual) / var(target)
    _, impala = impala_loss(agent, batch, settings)
    _, appo = appo_loss(agent, batch, AppoSettings(settings, clip_ratio=0.1,
                                                   normalize_advantages=False))  # fmt: skip
    assert impala["value/explained_variance"].item() == pytest.approx(want, rel=1e-4)
    assert appo["value/explained_variance"].item() == pytest.approx(want, rel=1e-4)


def test_the_learner_anchor_is_decoupled_ppo_step_by_step():
    """With the batch's `proximal_logits` (pi_0) the policy term is
    `sum_t -min(1, pi_0/mu) min(r A, clip(r) A)`, `r = pi / pi_0` (Python floats, one step at a
    time, from the advantages written out as the loss's docstring says); on-policy, with pi_0
    the actors' own policy, it is the behaviour-anchored loss."""
    from gazelle.algorithms.impala.loss import PROXIMAL_LOGITS, anchor_of, learner_view

    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, _ = make_batch(agent, seed=6, terminated_at=[(2, 1)])
    settings = AppoSettings(LossSettings(GAMMA, 0.0, 0.0, "none", 0.95), 0.2, False)
    on_policy = {**batch, PROXIMAL_LOGITS: anchor_of(agent, batch)[PROXIMAL_LOGITS]}
    plain, _ = appo_loss(agent, batch, settings)
    anchored, metrics = appo_loss(agent, on_policy, settings)
    torch.testing.assert_close(anchored, plain)
    assert float(metrics["appo/lag_weight_mean"]) == pytest.approx(1.0)

    g = torch.Generator().manual_seed(3)
    lagged = {**batch, "policy_logits": batch["policy_logits"] + torch.randn(
        batch["policy_logits"].shape, generator=g)}  # fmt: skip
    pi_0 = anchor_of(agent, batch)[PROXIMAL_LOGITS]
    proximal = pi_0 + 0.3 * torch.randn(pi_0.shape, generator=g)
    got, _ = appo_loss(agent, {**lagged, PROXIMAL_LOGITS: proximal}, settings)
    view = learner_view(agent, lagged, settings.impala)
    with torch.no_grad():
        vs = view.vtrace(0.95).vs
        next_vs = torch.cat([vs[1:], view.bootstrap_value.unsqueeze(0)])
        advantages = view.rewards + view.discounts * next_vs - view.values
        log_pi = view.target_log_probs()
        log_mu = view.distribution.log_prob(view.behaviour_logits, view.actions)
        log_pi0 = view.distribution.log_prob(proximal, view.actions)
    want = 0.0
    for t in range(advantages.shape[0]):
        for b in range(advantages.shape[1]):
            r = math.exp(float(log_pi[t, b]) - float(log_pi0[t, b]))
            w = min(1.0, math.exp(float(log_pi0[t, b]) - float(log_mu[t, b])))
            a = float(advantages[t, b])
            want += -w * min(r * a, min(max(r, 0.8), 1.2) * a)
    assert float(got) == pytest.approx(want, rel=1e-4)


class AnchorLearner:
    """Records each step's anchor, then moves the agent's policy (as an optimiser step)."""

    def __init__(self, agent) -> None:
        self.agent, self.anchors, self.values = agent, [], []

    def step(self, batch, learning_rate):
        from gazelle.algorithms.impala.loss import PROXIMAL_LOGITS, PROXIMAL_VALUES

        self.anchors.append((batch[PROXIMAL_LOGITS].clone(), batch["actor_id"].clone()))
        self.values.append(batch[PROXIMAL_VALUES].clone())
        with torch.no_grad():
            self.agent.policy.bias.add_(0.5)
            for parameter in self.agent.baseline.parameters():
                parameter.add_(0.5)
        return {"losses/total": torch.tensor(0.0), "learner/skipped": 0.0}


def test_the_learner_anchor_is_the_policy_before_the_batchs_passes():
    """`--clip-anchor learner` (and `--targets batch`): every optimiser step of a batch sees
    the learner's policy and values as they were before the first of them (each minibatch
    its own unrolls of them), not as the earlier steps left them."""
    from gazelle.algorithms.impala.loss import PROXIMAL_LOGITS, PROXIMAL_VALUES, anchor_of

    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, _ = make_batch(agent, seed=7)
    batch["actor_id"] = torch.arange(batch["action"].shape[1])
    batch["policy_version"] = torch.zeros(batch["action"].shape[1], dtype=torch.int64)
    before = anchor_of(agent, batch)[PROXIMAL_LOGITS]
    values = anchor_of(agent, batch)[PROXIMAL_VALUES]
    learner = AnchorLearner(agent)
    run = SimpleNamespace(passes=(2, 2), learner=learner, anchor_at_learner=True)
    train_on_batch(run, batch, 0.001)
    assert len(learner.anchors) == 4
    for (anchor, unrolls), start in zip(learner.anchors, learner.values, strict=True):
        torch.testing.assert_close(anchor, before[:, unrolls.long()])
        torch.testing.assert_close(start, values[:, unrolls.long()])
    after = anchor_of(agent, batch)  # the steps moved the policy and the values
    assert not torch.allclose(after[PROXIMAL_LOGITS], before)
    assert not torch.allclose(after[PROXIMAL_VALUES], values)


@pytest.mark.parametrize("use_lstm", [False, True])
def test_batch_targets_are_the_values_before_the_passes_written_out_step_by_step(use_lstm):
    """`--targets batch`: v_s and the advantages come from V_0 and pi_0, the learner before
    the batch's passes (`anchor_of`), however far the steps have since moved it: on-policy
    at lambda 1, v_s are the n-step returns bootstrapped from V_0 (the slow reference) and
    the policy term is `sum_t -min(r A, clip(r) A)`, `A = r_t + gamma v_{t+1} - V_0(x_t)`,
    `r = pi / pi_0`. `--targets step` takes them from the moved learner instead."""
    from gazelle.algorithms.impala.loss import PROXIMAL_VALUES, anchor_of, learner_view

    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=use_lstm)
    batch, _ = make_batch(agent, seed=8, terminated_at=[(2, 1)], truncated_at=[(4, 0)])
    anchored = {**batch, **anchor_of(agent, batch)}
    start = anchored[PROXIMAL_VALUES].numpy()
    with torch.no_grad():  # the passes' steps, as far as the targets can see
        for parameter in agent.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    impala = LossSettings(GAMMA, 0.5, 0.0, "none", vtrace_lambda=1.0)
    kept: dict[str, torch.Tensor] = {}

    _, batch_metrics = appo_loss(agent, anchored, AppoSettings(impala, 0.2, False, "batch"),
                                 keep_targets=lambda vs: kept.__setitem__("batch", vs))  # fmt: skip
    appo_loss(agent, anchored, AppoSettings(impala, 0.2, False, "step"),
              keep_targets=lambda vs: kept.__setitem__("step", vs))  # fmt: skip
    numpy_batch = {k: v.numpy() for k, v in batch.items()}
    want = reference_targets(numpy_batch, start, GAMMA)
    torch.testing.assert_close(kept["batch"], torch.tensor(want, dtype=torch.float32))
    moved = learner_view(agent, batch, impala)
    torch.testing.assert_close(kept["step"], moved.vtrace(1.0).vs)  # the moved learner's
    assert not torch.allclose(kept["step"], kept["batch"], atol=1e-3)

    with torch.no_grad():
        log_pi = moved.target_log_probs()
        log_pi0 = moved.distribution.log_prob(anchored["proximal_logits"], moved.actions)
    policy = 0.0
    T, B = want.shape
    for t in range(T):
        for b in range(B):
            next_v = want[t + 1, b] if t + 1 < T else start[T, b]
            discount = float(moved.discounts[t, b])
            a = float(moved.rewards[t, b]) + discount * next_v - start[t, b]
            r = math.exp(float(log_pi[t, b]) - float(log_pi0[t, b]))
            policy += -min(r * a, min(max(r, 0.8), 1.2) * a)
    assert float(batch_metrics["losses/policy"]) == pytest.approx(policy, rel=1e-4)


def test_batch_targets_refuse_a_batch_without_the_values_before_the_passes():
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch, _ = make_batch(agent, seed=9)
    settings = AppoSettings(LossSettings(GAMMA, 0.5, 0.0, "none"), 0.2, False, "batch")
    with pytest.raises(ValueError, match="proximal_values"):
        appo_loss(agent, batch, settings)


def test_the_targets_flag_anchors_the_batch_at_the_learner_and_refuses_the_behaviour_anchor():
    """`--targets batch` on CartPole (whose APPO preset leaves the clip at the actors'
    policy) still gives each batch the learner's policy and values before its passes; with
    `--clip-anchor behaviour` given, or a value not offered, the flag is refused by name."""
    from gazelle.algorithms.impala.build import ImpalaRun
    from gazelle.cli import build_parser, config_from_args

    def command(*argv):
        args = build_parser().parse_args(["train", "--logdir", "unused", "--algo", "appo", *argv])
        return validate(config_from_args(args))

    config = command("--env", "CartPole-v1", "--targets", "batch")
    assert config.appo.targets == "batch" and config.appo.clip_anchor is None
    assert ImpalaRun.anchor_at_learner.fget(SimpleNamespace(config=config))
    assert not ImpalaRun.anchor_at_learner.fget(
        SimpleNamespace(config=command("--env", "CartPole-v1"))
    )
    with pytest.raises(
        ConfigError, match=r"--targets: invalid value 'batch'.*--clip-anchor learner"
    ):
        command("--env", "CartPole-v1", "--targets", "batch", "--clip-anchor", "behaviour")
    with pytest.raises(
        ConfigError, match=r"--targets: invalid value 'gae'; allowed: step \| batch"
    ):
        command("--env", "CartPole-v1", "--targets", "gae")
