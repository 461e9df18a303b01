"""PopArt (`--popart`): the value head's statistics, the output-preserving rescale, the loss in
units of sigma, the learner's update after each step, and the statistics in checkpoints and in
the weights actors pull."""

import functools

import numpy as np
import pytest
import torch

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.build import vtrace_loss
from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.algorithms.impala.popart import PopArtLoss
from gazelle.backends.local.params import flatten, load_flat
from gazelle.config import Config, ConfigError, resolve, validate
from gazelle.envs.probe import EnvProbe
from gazelle.models import Agent
from gazelle.models.value import SIGMA_MIN, ValueHead
from gazelle.runtime.learner import Learner
from gazelle.types import ObsSpec
from test_learner import make_batch

D, A = 4, 2
SPEC = ObsSpec((D,), np.dtype(np.float32), num_actions=A)
VECTOR = EnvProbe(["CartPole-v1"], SPEC, 1, "gym")
DOOM = EnvProbe(["VizdoomBasic-v1"], ObsSpec((3, 72, 96), np.dtype(np.uint8), 3), 4, "vizdoom")
SETTINGS = LossSettings(0.99, 0.5, 0.01, "none")


def with_stats(head: ValueHead, mu: float, sigma: float) -> ValueHead:
    head.mu.fill_(mu)
    head.nu.fill_(sigma**2 + mu**2)
    head.count.fill_(1000)  # past the start, where the step is 1 / k
    return head


def test_a_fresh_head_is_a_plain_linear_layer():
    torch.manual_seed(0)
    head, x = ValueHead(5), torch.randn(7, 5)
    assert torch.equal(head(x), x @ head.weight.T + head.bias)
    assert head.mu.item() == 0.0 and head.sigma.item() == 1.0


def test_an_update_moves_the_moments_and_preserves_every_output():
    torch.manual_seed(0)
    head = with_stats(ValueHead(5), mu=2.0, sigma=3.0)
    x = torch.randn(64, 5)
    before = head(x).detach()
    targets = 50.0 + 20.0 * torch.randn(10, 8)
    head.update(targets, rate=0.25)
    # The moments by hand: an exponential moving average of the targets' first two moments.
    mu = 0.75 * 2.0 + 0.25 * targets.mean().item()
    nu = 0.75 * (9.0 + 4.0) + 0.25 * targets.square().mean().item()
    assert head.mu.item() == pytest.approx(mu, rel=1e-5)
    assert head.sigma.item() == pytest.approx((nu - mu**2) ** 0.5, rel=1e-5)
    assert head.sigma.item() > 3.5  # moved towards the targets' spread, 20
    torch.testing.assert_close(head(x), before, rtol=1e-5, atol=1e-4)
    # The normalised output changed: that is where the rescale went.
    assert not torch.allclose(head.normalized(x), (before - 2.0) / 3.0, atol=1e-3)


def test_rate_one_gives_the_targets_mean_and_std_and_sigma_has_a_floor():
    head, targets = ValueHead(3), torch.tensor([1.0, 3.0, 5.0, 7.0])
    head.update(targets, rate=1.0)
    assert head.mu.item() == pytest.approx(4.0)
    assert head.sigma.item() == pytest.approx(float(np.std([1, 3, 5, 7])), rel=1e-5)
    head.update(torch.full((4,), 2.5), rate=1.0)  # no spread at all
    assert head.sigma.item() == pytest.approx(SIGMA_MIN)


def test_the_first_updates_average_the_batches_then_the_rate_takes_over():
    """Step 1/k at the k-th update while larger than the rate: the first statistics are the
    first batch's, not a small step away from mu = 0, sigma = 1."""
    torch.manual_seed(0)
    head = ValueHead(3)
    batches = [100 + 30 * torch.randn(64) for _ in range(6)]
    for k, batch in enumerate(batches[:4], start=1):
        head.update(batch, rate=0.25)
        seen = torch.cat(batches[:k])
        want_mu = seen.mean().item()
        want_sigma = (seen.square().mean() - seen.mean().square()).sqrt().item()
        assert head.mu.item() == pytest.approx(want_mu, rel=1e-4)
        assert head.sigma.item() == pytest.approx(want_sigma, rel=1e-3)
    mu = head.mu.item()
    head.update(batches[4], rate=0.25)  # 1/5 < 0.25: the moving average's step
    assert head.mu.item() == pytest.approx(0.75 * mu + 0.25 * batches[4].mean().item(), rel=1e-5)


def test_the_loss_in_sigma_units_is_the_plain_loss_scaled():
    """With sigma s, the baseline term is the plain one / s^2 and the policy term / s; the
    entropy term does not change. mu does not enter the loss."""
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    batch, _ = make_batch(agent, terminated_at=[(2, 0)])
    _, plain = impala_loss(agent, batch, SETTINGS)
    # Statistics that this batch cannot move (a long history, a tiny rate): sigma stays s.
    popart = LossSettings(0.99, 0.5, 0.01, "none", popart=True, popart_rate=1e-12)
    with_stats(agent.baseline, mu=0.0, sigma=1.0).count.fill_(1e12)
    _, same = impala_loss(agent, batch, popart)
    assert same["losses/total"].item() == pytest.approx(plain["losses/total"].item(), rel=1e-6)
    # Change sigma and mu but keep the outputs: the targets and values stay in reward units.
    agent.baseline.count.fill_(1)  # past the first step (which does not keep the outputs)
    agent.baseline.update(10 * torch.randn(50) + 3, rate=1.0)
    agent.baseline.count.fill_(1e12)
    s = agent.baseline.sigma.item()
    assert s > 5
    _, scaled = impala_loss(agent, batch, popart)
    for name, power in (("losses/baseline", 2), ("losses/policy", 1), ("losses/entropy", 0)):
        assert scaled[name].item() == pytest.approx(plain[name].item() / s**power, rel=1e-4)


def test_the_loss_takes_sigma_with_this_batch_in_the_statistics():
    """PopArt's order: the statistics' step first, then the gradient step; on a fresh head
    (step 1 / 1) the loss's sigma is the spread of this batch's own targets."""
    torch.manual_seed(4)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    batch, _ = make_batch(agent)
    batch["reward"] = batch["reward"] * 30
    kept: list[torch.Tensor] = []
    _, plain = impala_loss(agent, batch, SETTINGS, keep_targets=kept.append)
    vs = kept[0]
    std = (vs.square().mean() - vs.mean().square()).sqrt().item()
    assert std > 3
    _, scaled = impala_loss(agent, batch, LossSettings(0.99, 0.5, 0.01, "none", popart=True))
    assert scaled["losses/policy"].item() == pytest.approx(
        plain["losses/policy"].item() / std, rel=1e-4
    )
    assert agent.baseline.count.item() == 0  # the loss changed nothing


def test_appo_loss_in_sigma_units_is_the_plain_loss_scaled():
    torch.manual_seed(1)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    batch, _ = make_batch(agent)
    plain = AppoSettings(SETTINGS, clip_ratio=0.2, normalize_advantages=False)
    impala = LossSettings(0.99, 0.5, 0.01, "none", popart=True, popart_rate=1e-12)
    popart = AppoSettings(impala, 0.2, normalize_advantages=False)
    _, want = appo_loss(agent, batch, plain)
    agent.baseline.count.fill_(1)  # past the first step (which does not keep the outputs)
    agent.baseline.update(8 * torch.randn(50), rate=1.0)
    agent.baseline.count.fill_(1e12)
    s = agent.baseline.sigma.item()
    _, got = appo_loss(agent, batch, popart)
    assert got["losses/baseline"].item() == pytest.approx(
        want["losses/baseline"].item() / s**2, 1e-4
    )
    assert got["losses/policy"].item() == pytest.approx(want["losses/policy"].item() / s, rel=1e-4)


def test_the_learner_moves_the_statistics_after_each_step_and_not_after_a_skipped_one():
    torch.manual_seed(2)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    batch, _ = make_batch(agent)
    batch["reward"] = batch["reward"] * 40  # returns far from 1 (reward clipping off)
    kept: list[torch.Tensor] = []
    inner = functools.partial(
        impala_loss, settings=LossSettings(0.99, 0.5, 0.01, "none", popart=True)
    )

    def spy(agent, batch, keep_targets):
        return inner(agent, batch, keep_targets=lambda vs: (kept.append(vs), keep_targets(vs)))

    loss = PopArtLoss(spy, rate=0.5)
    learner = Learner(agent, torch.optim.SGD(agent.parameters(), lr=1.0), loss,
                      torch.device("cpu"), after_step=loss.after_step)  # fmt: skip
    frame = {"frame": batch["frame"]}
    done = batch["terminated"] | batch["truncated"]
    agent.baseline.count.fill_(1)  # past the first step (which does not keep the outputs)
    before, _ = agent.unroll(frame, batch["action"], batch["reward"], done, ())
    metrics = learner.step(batch, learning_rate=0.0)  # no weight step: only PopArt's rescale
    (vs,) = kept
    assert agent.baseline.mu.item() == pytest.approx(vs.mean().item() / 2, rel=1e-5)  # 1/2
    # The loss ran with the statistics the step then took.
    assert metrics["popart/sigma"].item() == pytest.approx(agent.baseline.sigma.item(), rel=1e-6)
    assert agent.baseline.sigma.item() > 3
    after, _ = agent.unroll(frame, batch["action"], batch["reward"], done, ())
    torch.testing.assert_close(after.baseline, before.baseline, rtol=1e-5, atol=1e-4)
    mu = agent.baseline.mu.item()
    batch["truncated"][1, 0], batch["truncation_value"][1, 0] = True, float("nan")  # NaN loss
    assert learner.step(batch, learning_rate=0.0)["learner/skipped"] == 1.0
    assert agent.baseline.mu.item() == mu


def test_the_statistics_reach_actors_and_checkpoints_and_old_checkpoints_load(tmp_path):
    torch.manual_seed(3)
    agent = Agent(SPEC, torso="mlp", use_lstm=False)
    agent.baseline.count.fill_(1)
    agent.baseline.update(30 * torch.randn(40) + 7, rate=1.0)
    x = torch.randn(1, 2, D)
    args = (
        torch.zeros(1, 2, dtype=torch.long),
        torch.zeros(1, 2),
        torch.zeros(1, 2, dtype=torch.bool),
        (),
    )
    want = agent.unroll({"frame": x}, *args)[0].baseline
    actor = Agent(SPEC, torso="mlp", use_lstm=False)
    load_flat(actor, flatten(agent))  # what an actor pulls
    torch.testing.assert_close(actor.unroll({"frame": x}, *args)[0].baseline, want)
    torch.save(agent.state_dict(), tmp_path / "new.pt")
    resumed = Agent(SPEC, torso="mlp", use_lstm=False)
    resumed.load_state_dict(torch.load(tmp_path / "new.pt", weights_only=True))
    assert resumed.baseline.mu.item() == agent.baseline.mu.item()
    old = {k: v for k, v in agent.state_dict().items() if not k.endswith((".mu", ".nu", ".count"))}
    resumed.load_state_dict(old)  # a checkpoint from before the statistics: mu 0, sigma 1
    assert resumed.baseline.mu.item() == 0.0 and resumed.baseline.sigma.item() == 1.0


def test_popart_with_unclipped_rewards_is_the_vizdoom_preset_and_off_elsewhere():
    for algo in ("impala", "appo"):
        doom = resolve(Config.of(algo=algo), DOOM).algorithm
        assert (doom.popart, doom.reward_clipping) == (True, "none")
        vector = resolve(Config.of(algo=algo), VECTOR).algorithm
        assert (vector.popart, vector.reward_clipping) == (False, "abs_one")
        paper = resolve(Config.of(algo=algo, preset="impala-paper"), DOOM).algorithm
        assert (paper.popart, paper.reward_clipping) == (False, "abs_one")
    appo = resolve(Config.of(algo="appo"), DOOM).algorithm
    assert appo.normalize_advantages is False  # PopArt scales them already
    assert resolve(Config.of(algo="appo"), VECTOR).algorithm.normalize_advantages is True
    clipped = resolve(Config.of(reward_clipping="abs_one", popart=False), DOOM).algorithm
    assert (clipped.popart, clipped.reward_clipping) == (False, "abs_one")  # flags win
    assert isinstance(vtrace_loss(resolve(Config.of(), DOOM)), PopArtLoss)
    assert not isinstance(vtrace_loss(resolve(Config.of(), VECTOR)), PopArtLoss)


def test_the_popart_rate_is_checked():
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match=rf"--popart-rate: invalid value {bad}"):
            validate(Config.of(env="CartPole-v1", popart_rate=bad))
