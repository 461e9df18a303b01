"""APPO's minibatches of single steps (`--minibatch-unit step`): the steps dealt apart from
their unrolls, each with the targets taken on its whole unroll, give the loss of the whole
batch term by term; every epoch deals every step once, after taking its targets; and the
flag is refused where a step alone cannot be trained on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.loop import train_on_batch
from gazelle.algorithms.impala.loss import (
    PROXIMAL_LOGITS,
    STEP_VS,
    LossSettings,
    anchor_of,
    sequence_targets,
)
from gazelle.algorithms.impala.passes import select_steps
from gazelle.config import ConfigError, validate
from gazelle.models import Agent
from test_learner import SPEC, B, T, make_batch


def off_policy_batch(agent: Agent, seed: int) -> dict[str, torch.Tensor]:
    """`make_batch`'s, with behaviour logits off the agent's and its policy moved after
    the anchor was taken, so that the lag's weight, the ratio and its clip all act."""
    batch, _ = make_batch(agent, seed=seed, terminated_at=[(2, 1)], truncated_at=[(4, 0)])
    g = torch.Generator().manual_seed(seed + 100)
    batch["policy_logits"] = batch["policy_logits"] + torch.randn(
        batch["policy_logits"].shape, generator=g
    )
    batch["policy_version"] = torch.zeros(B, dtype=torch.int64)
    batch = {**batch, **anchor_of(agent, batch)}
    with torch.no_grad():
        for parameter in agent.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=g))
    return batch


def loss_and_grads(agent, batch, settings):
    agent.zero_grad()
    loss, metrics = appo_loss(agent, batch, settings)
    loss.backward()
    return metrics, [p.grad.clone() for p in agent.parameters()]


@pytest.mark.parametrize("targets", ["step", "batch"])
def test_steps_dealt_apart_sum_to_the_whole_batchs_loss_and_gradient(targets):
    """Every step of the batch, dealt into two minibatches of single steps in a random
    order, each step carrying v_s and A_t from its whole unroll (`sequence_targets`): the
    two minibatches' loss terms and gradients add up to the whole batch's (the loss is a
    sum over steps), so each step is paired with its own x_t, action, reward, end, the
    actors' and the anchor's policies. Off-policy, clipped, lambda 0.9, with ends."""
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", use_lstm=False)
    batch = off_policy_batch(agent, seed=3)
    impala = LossSettings(0.9, 0.5, 0.01, "none", vtrace_lambda=0.9)
    settings = AppoSettings(impala, 0.2, False, targets)
    whole, whole_grads = loss_and_grads(agent, batch, settings)

    source = {**batch, **sequence_targets(agent, batch, impala, fixed=targets == "batch")}
    order = torch.randperm(T * B, generator=torch.Generator().manual_seed(1))
    first, first_grads = loss_and_grads(agent, select_steps(source, order[:7]), settings)
    second, second_grads = loss_and_grads(agent, select_steps(source, order[7:]), settings)
    for term in ("losses/policy", "losses/baseline", "losses/entropy"):
        assert float(first[term]) + float(second[term]) == pytest.approx(
            float(whole[term]), rel=1e-5, abs=1e-6
        ), term
    for got_a, got_b, want in zip(first_grads, second_grads, whole_grads, strict=True):
        torch.testing.assert_close(got_a + got_b, want, rtol=1e-4, atol=1e-6)
    assert float(whole["ppo/clip_fraction"]) > 0  # the clip acted on some steps


def test_select_steps_pairs_each_step_with_what_followed_it():
    """Step t of unroll b (index t * B + b): the `[T+1, B]` fields' rows t and t + 1, the
    shifted `[T, B]` fields' row t, the per-unroll fields' b."""
    batch = {
        "reward": torch.arange((T + 1) * B, dtype=torch.float32).reshape(T + 1, B),
        PROXIMAL_LOGITS: torch.arange(T * B * 2, dtype=torch.float32).reshape(T, B, 2),
        "policy_version": torch.arange(B) + 10,
    }
    index = torch.tensor([0, B + 1, (T - 1) * B + B - 1])
    steps = select_steps(batch, index)
    want_t, want_b = [0, 1, T - 1], [0, 1, B - 1]
    assert steps["reward"].shape == (2, 3) and steps[PROXIMAL_LOGITS].shape == (1, 3, 2)
    for i, (t, b) in enumerate(zip(want_t, want_b, strict=True)):
        assert steps["reward"][0, i] == batch["reward"][t, b]
        assert steps["reward"][1, i] == batch["reward"][t + 1, b]
        torch.testing.assert_close(steps[PROXIMAL_LOGITS][0, i], batch[PROXIMAL_LOGITS][t, b])
        assert steps["policy_version"][i] == 10 + b


class StepLearner:
    """Records, in order, each epoch's targets being taken and each step's steps."""

    def __init__(self) -> None:
        self.events: list[tuple[str, list[int]]] = []
        self.agent = None

    def targets(self, agent, batch):
        self.events.append(("targets", []))
        return {STEP_VS: torch.zeros(T, B)}

    def step(self, batch, learning_rate):
        assert batch[STEP_VS].shape[0] == 1  # each step carries its unroll's target
        self.events.append(("step", sorted(int(i) for i in batch["cell"][0])))
        return {"losses/total": torch.tensor(1.0), "learner/skipped": 0.0}


def test_every_epoch_takes_its_targets_then_deals_every_step_once():
    learner = StepLearner()
    run = SimpleNamespace(passes=(2, 3), learner=learner, step_targets=learner.targets)
    cells = torch.arange((T + 1) * B).reshape(T + 1, B)
    batch = {"cell": cells, "reward": torch.zeros(T + 1, B), "policy_version": torch.zeros(B)}
    train_on_batch(run, batch, 0.001)
    kinds = [kind for kind, _ in learner.events]
    assert kinds == ["targets", "step", "step", "step"] * 2
    for epoch in range(2):
        dealt = [learner.events[4 * epoch + 1 + i][1] for i in range(3)]
        assert all(len(steps) == T * B // 3 for steps in dealt)
        assert sorted(s for steps in dealt for s in steps) == list(range(T * B))  # row 0: own cell


def command(*argv):
    from gazelle.cli import build_parser, config_from_args

    args = build_parser().parse_args(["train", "--logdir", "unused", "--algo", "appo", *argv])
    return validate(config_from_args(args))


def test_the_flag_sets_the_runs_step_targets_and_is_refused_where_steps_cannot_be_dealt(
    tmp_path,
):
    from gazelle.algorithms.common import prepare
    from gazelle.algorithms.impala.build import ImpalaRun

    def resolved(*argv):
        config = command("--env", "CartPole-v1", *argv).replace(logdir=str(tmp_path / "run"))
        return SimpleNamespace(config=prepare(config)[0])

    assert ImpalaRun.step_targets.fget(resolved("--minibatch-unit", "step")) is not None
    assert ImpalaRun.step_targets.fget(resolved()) is None
    with pytest.raises(ConfigError, match=r"--minibatch-unit: invalid value 'step'.*--no-use-lstm"):
        command("--env", "CartPole-v1", "--minibatch-unit", "step", "--use-lstm")
    with pytest.raises(
        ConfigError,
        match=r"--minibatches: invalid value 7.*--batch-size x --unroll-length \(24 steps per",
    ):
        command("--env", "CartPole-v1", "--minibatch-unit", "step", "--minibatches", "7",
                "--batch-size", "4", "--unroll-length", "6")  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"--minibatch-unit: invalid value 'steps'.*unroll \| step"
    ):
        command("--env", "CartPole-v1", "--minibatch-unit", "steps")
