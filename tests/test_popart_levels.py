"""Multi-task PopArt: one normalised value output and one mu/sigma per level (the paper's
DMLab-30 agent). Each level's statistics follow its own targets only; each unroll's loss is
in its own level's sigma; actors (local and central inference) and test mode pick their
level's value."""

import copy
import functools
import threading

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.algorithms.appo.loss import AppoSettings, appo_loss
from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
)
from gazelle.backends.local.params import ParamStore
from gazelle.models import Agent
from gazelle.models.value import ValueHead
from gazelle.runtime.policy import CentralPolicy, LocalPolicy
from test_learner import B, make_batch
from test_popart import SETTINGS, SPEC

CTX = mp.get_context("spawn")


def shift(head: ValueHead, mu: list[float]) -> ValueHead:
    """Each level's mu set to `mu`, sigma kept at 1 (the second moment moved with it)."""
    with torch.no_grad():
        head.mu.copy_(torch.tensor(mu))
        head.nu.copy_(head.mu.square() + 1.0)
    return head


def test_each_level_moves_towards_its_own_targets_and_keeps_its_outputs():
    torch.manual_seed(0)
    head = ValueHead(5, num_levels=3)
    head.mu.copy_(torch.tensor([1.0, -2.0, 30.0]))
    head.nu.copy_(torch.tensor([1.0 + 4.0, 4.0 + 9.0, 900.0 + 100.0]))  # sigma 2, 3, 10
    head.count.fill_(1000)
    x = torch.randn(16, 5)
    before = {level: head(x, torch.full((16,), level)).detach() for level in range(3)}
    level = torch.tensor([0, 2, 0, 2])  # level 1 has no unroll in this batch
    targets = torch.randn(7, 4) * 20 + 100 * level.float()  # [T, B]
    head.update(targets, rate=0.25, level=level)
    for lv, (mu0, nu0) in {0: (1.0, 5.0), 2: (30.0, 1000.0)}.items():
        mine = targets[:, level == lv]
        mu = 0.75 * mu0 + 0.25 * mine.mean().item()
        nu = 0.75 * nu0 + 0.25 * mine.square().mean().item()
        assert head.mu[lv].item() == pytest.approx(mu, rel=1e-5)
        assert head.nu[lv].item() == pytest.approx(nu, rel=1e-5)
    # The absent level: no step, no count, the same statistics.
    assert head.mu[1].item() == -2.0 and head.nu[1].item() == 13.0
    assert head.count.tolist() == [1001.0, 1000.0, 1001.0]
    for lv in range(3):
        torch.testing.assert_close(head(x, torch.full((16,), lv)), before[lv], rtol=1e-5, atol=1e-4)


def test_a_head_with_several_levels_needs_the_level_and_picks_each_rows():
    torch.manual_seed(1)
    head = ValueHead(4, num_levels=2)
    shift(head, [0.0, 100.0])
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="2 levels; pass each row's level id"):
        head(x)
    out = head(x, torch.tensor([1, 0, 1]))
    every = x @ head.weight.T + head.bias + head.mu  # [3, 2], sigma 1
    torch.testing.assert_close(out.squeeze(-1), every[[0, 1, 2], [1, 0, 1]])
    with pytest.raises(ValueError, match="num_levels: invalid value 0"):
        ValueHead(4, num_levels=0)


def two_level_twin(agent: Agent) -> Agent:
    """`agent` with a two-level value head whose rows both start as its one row."""
    twin = Agent(SPEC, torso="mlp", use_lstm=True, num_levels=2)
    state = {k: v for k, v in agent.state_dict().items() if not k.startswith("baseline.")}
    twin.load_state_dict(state, strict=False)
    with torch.no_grad():
        twin.baseline.weight.copy_(agent.baseline.weight.expand(2, -1))
        twin.baseline.bias.copy_(agent.baseline.bias.expand(2))
    return twin


def test_the_agent_gives_each_unroll_its_levels_value():
    torch.manual_seed(2)
    agent = two_level_twin(Agent(SPEC, torso="mlp", use_lstm=True))
    shift(agent.baseline, [0.0, 50.0])
    frame = torch.randn(5, B, 4)
    args = (
        torch.zeros(5, B, dtype=torch.long),
        torch.zeros(5, B),
        torch.zeros(5, B, dtype=torch.bool),
    )
    level = torch.tensor([1, 0, 1])
    out, _ = agent.unroll({"frame": frame}, *args, agent.initial_state(B), level=level)
    zeros, _ = agent.unroll({"frame": frame}, *args, agent.initial_state(B), level=torch.zeros(B))
    torch.testing.assert_close(out.baseline, zeros.baseline + 50.0 * level.float())
    step, _ = agent.step(
        {"frame": frame[0]}, *(a[0] for a in args), agent.initial_state(B), level=level
    )
    torch.testing.assert_close(step.baseline, out.baseline[0])


def split(batch: dict[str, torch.Tensor], unrolls: list[int]) -> dict[str, torch.Tensor]:
    """The sub-batch of `unrolls` (fields `[T+1, B, ...]`, states and level ids `[B, ...]`)."""
    index = torch.tensor(unrolls)
    per_unroll = ("state_h", "state_c", "level_id")
    return {k: v[index] if k in per_unroll else v[:, index] for k, v in batch.items()}


def appo(settings: LossSettings) -> functools.partial:
    """APPO's loss with IMPALA's `settings` (no advantage normalisation: its ViZDoom preset)."""
    return functools.partial(appo_loss, settings=AppoSettings(settings, 0.2, False))


def impala(settings: LossSettings) -> functools.partial:
    return functools.partial(impala_loss, settings=settings)


@pytest.mark.parametrize("make_loss", [impala, appo])
def test_each_unroll_is_scaled_by_its_own_levels_sigma(make_loss):
    """The baseline term of a level-l unroll is the plain one / sigma_l^2, its policy term the
    plain one / sigma_l: the sum over unrolls of the two levels' plain terms, scaled (both
    losses sum over steps; on this on-policy batch APPO's clip does not bind)."""
    torch.manual_seed(3)
    plain_agent = Agent(SPEC, torso="mlp", use_lstm=True)
    batch, _ = make_batch(plain_agent, terminated_at=[(2, 0)])
    batch["level_id"] = torch.tensor([1, 0, 1], dtype=torch.int32)
    agent = two_level_twin(plain_agent)
    # Different spreads per level, outputs kept (the targets stay in reward units), then a
    # history this batch cannot move (a tiny rate).
    agent.baseline.count.fill_(1)  # past the first step (which does not keep the outputs)
    agent.baseline.update(torch.randn(40, 2) * torch.tensor([4.0, 25.0]), 1.0, torch.arange(2))
    agent.baseline.count.fill_(1e12)
    sigma = agent.baseline.sigma.tolist()
    assert sigma[0] == pytest.approx(4.0, rel=0.3) and sigma[1] == pytest.approx(25.0, rel=0.3)
    popart = LossSettings(0.99, 0.5, 0.01, "none", popart=True, popart_rate=1e-12)
    _, got = make_loss(popart)(agent, batch)
    parts = {
        lv: make_loss(SETTINGS)(plain_agent, split(batch, u))[1]
        for lv, u in ((0, [1]), (1, [0, 2]))
    }
    for name, power in (("losses/baseline", 2), ("losses/policy", 1)):
        want = sum(parts[lv][name].item() / sigma[lv] ** power for lv in (0, 1))
        assert got[name].item() == pytest.approx(want, rel=1e-4)
    entropy = sum(parts[lv]["losses/entropy"].item() for lv in (0, 1))
    assert got["losses/entropy"].item() == pytest.approx(entropy, rel=1e-5)


def test_actors_get_their_levels_value_through_local_and_central_inference():
    """Two actors of different levels share one central server; each gets the same values as
    its own agent copy given its level (and not the other level's)."""
    torch.manual_seed(4)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8, num_levels=2)
    shift(agent.baseline, [-7.0, 70.0])
    with torch.no_grad():  # why: equal rows, so the two levels differ by their mu alone
        agent.baseline.weight[1] = agent.baseline.weight[0]
        agent.baseline.bias[1] = agent.baseline.bias[0]
    params = ParamStore(agent, CTX)
    params.publish(agent, 0)
    envs = 3
    channels = InferenceChannels(SPEC, 2, envs, 8, CTX)
    stop = threading.Event()
    server = InferenceServer(
        channels, copy.deepcopy(agent), params, torch.device("cpu"), stop, max_wait_s=0.05
    )
    server.start()
    got: dict[int, torch.Tensor] = {}

    def act(level: int) -> None:
        client = SharedMemoryInferenceClient(channels, level, timeout_s=10.0)
        policy = CentralPolicy(client, envs, level=level)
        got[level] = policy.step(*inputs).baseline

    rng = np.random.default_rng(0)
    inputs = (
        {"frame": torch.from_numpy(rng.standard_normal((envs, 4)).astype(np.float32))},
        torch.zeros(envs, dtype=torch.long),
        torch.zeros(envs),
        torch.ones(envs, dtype=torch.bool),
    )
    try:
        threads = [threading.Thread(target=act, args=(level,)) for level in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        stop.set()
        server.close()
    for level in (0, 1):
        local = LocalPolicy(copy.deepcopy(agent), params, envs, level=level)
        local.begin_unroll()
        want = local.step(*inputs).baseline
        torch.testing.assert_close(got[level], want)
    torch.testing.assert_close(got[1] - got[0], torch.full((envs,), 77.0))


def test_the_ray_inference_host_reads_each_requests_level():
    """The Ray server (plain class, no Ray needed) passes each row's level to the agent."""
    from gazelle import registrations
    from gazelle.backends.ray.inference import InferenceHost

    torch.manual_seed(5)
    agent = Agent(SPEC, torso="mlp", use_lstm=False, num_levels=2)
    shift(agent.baseline, [0.0, 9.0])
    with torch.no_grad():
        agent.baseline.weight[1] = agent.baseline.weight[0]
        agent.baseline.bias[1] = agent.baseline.bias[0]
    host = InferenceHost(registrations.capture(), agent, "cpu", max_batch=8, max_wait_s=0.01)
    frame = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    request = {
        "frame": frame, "last_action": np.zeros(2, np.int64), "reward": np.zeros(2, np.float32),
        "done": np.ones(2, bool),
    }  # fmt: skip
    low, _ = host.infer({**request, "level": np.zeros(2, np.int64)}, 2)
    high, _ = host.infer({**request, "level": np.ones(2, np.int64)}, 2)
    np.testing.assert_allclose(np.asarray(high["baseline"]) - low["baseline"], 9.0, rtol=1e-5)


def test_a_levels_first_step_starts_its_value_at_the_mean_return():
    """A level's first step sets its statistics and leaves w and b: v(x) = sigma n(x) + mu with
    n(x) unchanged, so a fresh head (n ~ 0) starts at the mean return, not at 0. From its
    second step on, the level's outputs are kept; a level's first step does not touch others."""
    torch.manual_seed(6)
    head = ValueHead(5, num_levels=2)
    x = torch.randn(32, 5)
    zeros, ones = torch.zeros(32, dtype=torch.long), torch.ones(32, dtype=torch.long)
    n0, n1 = head.normalized(x, zeros).detach(), head.normalized(x, ones).detach()
    weight, bias = head.weight.clone(), head.bias.clone()
    targets = -150.0 + 40.0 * torch.randn(9, 2)
    head.update(targets, 0.01, torch.tensor([0, 0]))  # level 0 only
    assert torch.equal(head.weight, weight) and torch.equal(head.bias, bias)
    assert head.mu[0].item() == pytest.approx(targets.mean().item(), rel=1e-5)
    assert head.sigma[0].item() == pytest.approx(targets.std(unbiased=False).item(), rel=1e-4)
    torch.testing.assert_close(head(x, zeros), head.sigma[0] * n0 + head.mu[0])
    assert head.count.tolist() == [1.0, 0.0]
    kept = head(x, zeros).detach()
    more = torch.cat([-100.0 + 10.0 * torch.randn(9, 1), 500.0 + 80.0 * torch.randn(9, 1)], 1)
    head.update(more, 0.01, torch.tensor([0, 1]))  # level 0's second, level 1's first
    torch.testing.assert_close(head(x, zeros), kept, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(head(x, ones), head.sigma[1] * n1 + head.mu[1])
    assert head.mu[1].item() == pytest.approx(more[:, 1].mean().item(), rel=1e-5)
