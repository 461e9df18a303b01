"""The agent's side of action spaces and continuous control: the policy head's parameters
for each component, the learned log-std, the first actions' size, and the running
observation normalisation that travels with the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from gazelle.backends.local.params import flatten, load_flat
from gazelle.envs.action_spaces import action_spec_of
from gazelle.models import build_agent
from gazelle.models.agent import GAUSSIAN_MEAN_INIT_SCALE, Agent
from gazelle.models.normalize import CLIP, MAX_COUNT, ObsNorm
from gazelle.types import ObsSpec

MIXED = spaces.Tuple([spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)])


def spec_of(action_space: spaces.Space, obs: int = 5) -> ObsSpec:
    return ObsSpec((obs,), np.float32, actions=action_spec_of(action_space))


def step(agent: Agent, n: int = 4, scale: float = 1.0):
    state = agent.initial_state(n)
    obs = {"frame": scale * torch.randn(n, agent.obs_spec.frame_shape[0])}
    last = torch.from_numpy(agent.actions.zeros(n))
    return agent.step(obs, last, torch.zeros(n), torch.zeros(n, dtype=torch.bool), state)[0]


def test_the_learned_log_std_is_one_parameter_per_dimension_shared_by_all_states():
    torch.manual_seed(0)
    agent = Agent(spec_of(MIXED), "mlp", use_lstm=False, initial_log_std=-0.5)
    assert agent.log_std is not None and agent.log_std.shape == (2,)
    assert agent.policy.out_features == 3 + 2  # logits, then the means
    out = step(agent)
    params = out.policy_logits
    assert params.shape == (4, 3 + 4) and out.action.shape == (4, 3)
    torch.testing.assert_close(params[:, 5:], torch.full((4, 2), -0.5))
    # the log-std learns through the log-probability of the actions taken
    log_prob = agent.distribution.log_prob(params, out.action).sum()
    log_prob.backward()
    assert agent.log_std.grad is not None and agent.log_std.grad.abs().sum() > 0


def test_a_state_dependent_log_std_is_an_output_of_the_head():
    agent = Agent(spec_of(MIXED), "mlp", use_lstm=False, log_std="state", initial_log_std=-1.0)
    assert agent.log_std is None and agent.policy.out_features == 3 + 4
    torch.testing.assert_close(agent.policy.bias[5:], torch.full((2,), -1.0))
    with pytest.raises(ValueError, match="log_std: invalid value 'learned'"):
        Agent(spec_of(MIXED), "mlp", log_std="learned")


def test_the_first_gaussian_means_are_small_and_the_logits_are_the_seeds():
    """Seed init: the Gaussian mean rows scaled by GAUSSIAN_MEAN_INIT_SCALE (the first actions
    are noise around the middle of the bounds); the categorical rows keep the seed's init."""
    torch.manual_seed(1)
    agent = Agent(spec_of(MIXED), "mlp", use_lstm=False)
    rows = agent.policy.weight
    fan_in = rows.shape[1]
    assert float(rows[:3].std()) == pytest.approx(0.88 / fan_in**0.5, rel=0.3)
    assert float(rows[3:].std()) < 2 * GAUSSIAN_MEAN_INIT_SCALE / fan_in**0.5


def test_the_last_action_enters_the_core_as_its_encoding():
    """Two different last actions (same obs) give different outputs: the encoding reaches
    the core (its size is the spec's encoding_size)."""
    torch.manual_seed(2)
    spec = spec_of(MIXED)
    agent = build_agent(spec, "mlp", use_lstm=True)
    assert agent.core is not None
    assert agent.core.lstm.input_size == 64 + 1 + spec.actions.encoding_size
    obs = {"frame": torch.randn(1, 5).expand(2, 5)}
    last = torch.tensor([[0.0, 0.5, -0.5], [2.0, -0.5, 0.5]])
    done = torch.zeros(2, dtype=torch.bool)
    out, _ = agent.step(obs, last, torch.zeros(2), done, agent.initial_state(2))
    assert not torch.allclose(out.baseline[0], out.baseline[1])


def reference_moments(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return rows.mean(0), rows.var(0)


def test_running_statistics_are_those_of_all_rows_seen():
    norm = ObsNorm(3)
    rng = np.random.default_rng(0)
    seen = []
    for size in (5, 17, 1, 40):
        rows = rng.normal([1.0, -20.0, 300.0], [0.1, 5.0, 50.0], size=(size, 3))
        seen.append(rows)
        norm.update(torch.tensor(rows, dtype=torch.float32).reshape(1, size, 3))
    mean, var = reference_moments(np.concatenate(seen))
    np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), var, rtol=1e-4)
    assert float(norm.count) == 63
    x = torch.tensor([[1.0, -20.0, 300.0], [1e6, -1e6, 300.0]])
    out = norm(x)
    expected = (x[0].numpy() - mean) / np.sqrt(var)
    np.testing.assert_allclose(out[0].numpy(), expected, atol=1e-4)
    assert out[1].tolist()[:2] == [CLIP, -CLIP]


def test_the_count_stops_at_its_cap_and_later_batches_still_move_the_mean():
    norm = ObsNorm(1)
    norm.update(torch.zeros(10, 1))
    norm.count.fill_(MAX_COUNT)
    norm.update(torch.full((1000, 1), 10.0))
    assert float(norm.count) == MAX_COUNT
    assert float(norm.mean) == pytest.approx(10.0 * 1000 / (MAX_COUNT + 1000), rel=1e-4)


def test_the_statistics_travel_with_the_weights_to_an_actor():
    """The learner's statistics are float buffers: an actor's copy loaded from the flat
    weights (what ParamStore publishes) normalises as the learner does."""
    torch.manual_seed(3)
    spec = spec_of(spaces.Box(-1, 1, (2,), np.float32))
    learner = build_agent(spec, "mlp", use_lstm=False, normalize_obs=True)
    actor = build_agent(spec, "mlp", use_lstm=False, normalize_obs=True)
    learner.update_obs_stats({"frame": 100 + 30 * torch.randn(64, 5)})
    load_flat(actor, flatten(learner))
    obs = 100 + 30 * torch.randn(3, 5)
    last, reward, done = torch.zeros(3, 2), torch.zeros(3), torch.zeros(3, dtype=torch.bool)
    with torch.no_grad():
        want, _ = learner.step({"frame": obs}, last, reward, done, (), greedy=True)
        got, _ = actor.step({"frame": obs}, last, reward, done, (), greedy=True)
    torch.testing.assert_close(got.policy_logits, want.policy_logits)
    # without the statistics, inputs of ~100 saturate the tanh torso: another policy
    plain = build_agent(spec, "mlp", use_lstm=False, normalize_obs=False)
    plain.load_state_dict({k: v for k, v in learner.state_dict().items() if "obs_norms" not in k})
    with torch.no_grad():
        raw, _ = plain.step({"frame": obs}, last, reward, done, (), greedy=True)
    assert not torch.allclose(raw.policy_logits, want.policy_logits)


def test_train_on_batch_moves_the_statistics_once_per_batch_whatever_the_passes():
    from types import SimpleNamespace

    from gazelle.algorithms.impala.loop import train_on_batch

    agent = build_agent(spec_of(spaces.Discrete(2)), "mlp", use_lstm=False, normalize_obs=True)

    class Learner:
        def __init__(self) -> None:
            self.agent, self.steps = agent, 0

        def step(self, batch, learning_rate):
            self.steps += 1
            return {"learner/skipped": 0.0}

    learner = Learner()
    batch = {
        "frame": torch.ones(3, 4, 5),
        "policy_version": torch.zeros(4, dtype=torch.int64),
        "actor_id": torch.arange(4),
    }
    train_on_batch(SimpleNamespace(passes=(3, 2), learner=learner), batch, 0.001)  # type: ignore[arg-type]
    assert learner.steps == 6 and float(agent.obs_norms["frame"].count) == 12


def test_a_separate_value_network_shares_nothing_with_the_policy():
    """`separate_value`: the value's gradient reaches its own encoders only, the policy's
    reaches none of them, and the policy's outputs are those of the shared agent with the
    same policy weights; with an LSTM core it is refused."""
    torch.manual_seed(0)
    spec = spec_of(spaces.Box(-1, 1, (2,), np.float32))
    agent = Agent(spec, "mlp", use_lstm=False, separate_value=True)
    assert agent.value_encoders is not None
    own = set(agent.value_encoders.parameters()) | set(agent.baseline.parameters())
    out = step(agent)
    agent.zero_grad()
    out.baseline.sum().backward(retain_graph=True)
    touched = {p for p in agent.parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert touched and touched <= own
    agent.zero_grad()
    out.policy_logits.sum().backward()
    touched = {p for p in agent.parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert touched and not touched & own
    shared = Agent(spec, "mlp", use_lstm=False)
    shared.load_state_dict(
        {k: v for k, v in agent.state_dict().items() if not k.startswith("value_encoders.")}
    )
    torch.manual_seed(3)
    mine = step(agent)
    torch.manual_seed(3)
    theirs = step(shared)
    torch.testing.assert_close(mine.policy_logits, theirs.policy_logits)
    assert not torch.allclose(mine.baseline, theirs.baseline)
    with pytest.raises(ValueError, match=r"separate_value: .* needs a feed-forward agent"):
        Agent(spec, "mlp", use_lstm=True, separate_value=True)
