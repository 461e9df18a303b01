"""Action spaces: every Gymnasium action space read as an `ActionSpec`, the distribution of
each component against slow references written from the formulas, and the native action
each env of a batch receives."""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from gazelle.actions import ActionComponent, ActionSpec
from gazelle.distributions import ActionDistribution, random_actions
from gazelle.envs.action_spaces import action_spec_of, native_action
from gazelle.envs.batch import SerialEnvs
from gazelle.envs.spaces import obs_spec_of

COMPOSITE = spaces.Dict(
    {
        "move": spaces.Discrete(3, start=-1),
        "buttons": spaces.MultiBinary(4),
        "aim": spaces.Box(np.float32([-1.0, 0.0]), np.float32([1.0, 10.0])),
        "gear": spaces.MultiDiscrete([2, 5]),
    }
)


def test_every_standard_space_is_read_as_components():
    spec = action_spec_of(COMPOSITE)
    kinds = [(c.name, c.kind, c.size) for c in spec.components]
    assert kinds == [  # a Dict space's keys in its (sorted) order
        ("aim", "gaussian", 2),
        ("buttons", "bernoulli", 4),
        ("gear.0", "categorical", 2),
        ("gear.1", "categorical", 5),
        ("move", "categorical", 3),
    ]
    assert spec.components[0].low == (-1.0, 0.0) and spec.components[0].high == (1.0, 10.0)
    assert spec.slots == 2 + 4 + 1 + 1 + 1 and spec.shape == (9,)
    assert spec.num_params == 4 + 4 + 2 + 5 + 3 and spec.encoding_size == 2 + 4 + 2 + 5 + 3
    assert spec.dtype == np.float32 and not spec.is_scalar
    discrete = action_spec_of(spaces.Tuple([spaces.Discrete(2), spaces.MultiBinary((2, 2))]))
    assert discrete.dtype == np.int64 and discrete.shape == (5,)
    one = action_spec_of(spaces.Discrete(6))
    assert one.is_scalar and one.shape == () and one.num_actions == 6
    assert one == ActionSpec.categorical(6)
    with pytest.raises(ValueError, match="not one set of discrete actions"):
        _ = spec.num_actions


@pytest.mark.parametrize(
    ("space", "named"),
    [
        (spaces.Text(5), "Text"),
        (spaces.Box(0, 5, (2,), np.int64), "integer Box"),
        (spaces.Sequence(spaces.Discrete(2)), "Sequence"),
        (spaces.Tuple([spaces.Discrete(2), spaces.Text(3)]), "component '1'"),
        (spaces.Dict({}), "empty"),
    ],
)
def test_a_space_without_a_distribution_is_refused_naming_it(space, named):
    with pytest.raises(ValueError, match="unsupported action space") as err:
        action_spec_of(space)
    assert named in str(err.value) and "\n" not in str(err.value)


# -- slow references, one number at a time, from the formulas -------------------------


def ref_log_prob(spec: ActionSpec, params: list[float], action: list[float]) -> float:
    total, p, a = 0.0, 0, 0
    for c in spec.components:
        if c.kind == "categorical":
            logits = params[p : p + c.size]
            top = max(logits)
            log_z = top + math.log(sum(math.exp(x - top) for x in logits))
            total += logits[int(action[a])] - log_z
        elif c.kind == "bernoulli":
            for k in range(c.size):
                prob = 1.0 / (1.0 + math.exp(-params[p + k]))
                total += math.log(prob if action[a + k] == 1 else 1.0 - prob)
        else:
            for k in range(c.size):
                mean, log_std = params[p + k], params[p + c.size + k]
                std = math.exp(log_std)
                density = math.exp(-((action[a + k] - mean) ** 2) / (2 * std**2))
                total += math.log(density / (std * math.sqrt(2 * math.pi)))
        p, a = p + c.params, a + c.slots
    return total


def ref_entropy(spec: ActionSpec, params: list[float]) -> float:
    total, p = 0.0, 0
    for c in spec.components:
        if c.kind == "categorical":
            z = sum(math.exp(x) for x in params[p : p + c.size])
            probs = [math.exp(x) / z for x in params[p : p + c.size]]
            total -= sum(q * math.log(q) for q in probs)
        elif c.kind == "bernoulli":
            for k in range(c.size):
                q = 1.0 / (1.0 + math.exp(-params[p + k]))
                total -= q * math.log(q) + (1 - q) * math.log(1 - q)
        else:
            for k in range(c.size):
                std = math.exp(params[p + c.size + k])
                total += 0.5 * math.log(2 * math.pi * math.e * std**2)
        p += c.params
    return total


def ref_kl(spec: ActionSpec, first: list[float], second: list[float]) -> float:
    """KL by summing over every discrete outcome and by the Gaussians' closed form."""
    total, p = 0.0, 0
    for c in spec.components:
        if c.kind in ("categorical", "bernoulli"):
            groups = (
                [(first[p : p + c.size], second[p : p + c.size])]
                if c.kind == "categorical"
                else [([0.0, first[p + k]], [0.0, second[p + k]]) for k in range(c.size)]
            )
            for one, two in groups:
                z1, z2 = sum(map(math.exp, one)), sum(map(math.exp, two))
                for x, y in zip(one, two):
                    q1, q2 = math.exp(x) / z1, math.exp(y) / z2
                    total += q1 * math.log(q1 / q2)
        else:
            for k in range(c.size):
                m1, m2 = first[p + k], second[p + k]
                v1, v2 = math.exp(2 * first[p + c.size + k]), math.exp(2 * second[p + c.size + k])
                total += 0.5 * (math.log(v2 / v1) + (v1 + (m1 - m2) ** 2) / v2 - 1)
        p += c.params
    return total


@pytest.mark.parametrize("space", [COMPOSITE, spaces.Discrete(5), spaces.Box(-2, 2, (3,))])
def test_log_prob_entropy_and_kl_are_the_formulas(space):
    spec = action_spec_of(space)
    dist = ActionDistribution(spec)
    gen = torch.Generator().manual_seed(0)
    params = torch.randn(6, spec.num_params, generator=gen, dtype=torch.float64)
    other = torch.randn(6, spec.num_params, generator=gen, dtype=torch.float64)
    torch.manual_seed(1)
    actions = dist.sample(params)
    log_prob, entropy, kl = (
        dist.log_prob(params, actions),
        dist.entropy(params),
        dist.kl(params, other),
    )
    for row in range(6):
        flat = [float(x) for x in actions[row].reshape(-1)]
        p, q = params[row].tolist(), other[row].tolist()
        assert float(log_prob[row]) == pytest.approx(ref_log_prob(spec, p, flat), rel=1e-9)
        assert float(entropy[row]) == pytest.approx(ref_entropy(spec, p), rel=1e-9)
        assert float(kl[row]) == pytest.approx(ref_kl(spec, p, q), rel=1e-9)
    torch.testing.assert_close(dist.kl(params, params), torch.zeros(6, dtype=torch.float64))


def test_samples_follow_the_distribution():
    """Frequencies and moments of many samples match the parameters; the mode is the most
    likely action."""
    spec = action_spec_of(COMPOSITE)
    dist = ActionDistribution(spec)
    params = torch.tensor([0.5, -0.5, 0.0, -1.0,  # aim: means, log-stds
                           2.0, -2.0, 0.0, 0.0,  # buttons
                           0.0, 0.0,  0.0, 0.0, 0.0, 3.0, 0.0,  # gear.0, gear.1
                           1.0, 0.0, -1.0])  # move  # fmt: skip
    torch.manual_seed(0)
    draws = dist.sample(params.expand(40_000, -1))
    aim = draws[:, 0:2]
    torch.testing.assert_close(aim.mean(0), params[0:2], atol=0.03, rtol=0)
    torch.testing.assert_close(aim.std(0), params[2:4].exp(), atol=0.02, rtol=0)
    torch.testing.assert_close(draws[:, 2:6].mean(0), torch.sigmoid(params[4:8]), atol=0.01, rtol=0)
    gear = torch.bincount(draws[:, 7].long(), minlength=5).float() / len(draws)
    torch.testing.assert_close(gear, torch.softmax(params[10:15], 0), atol=0.01, rtol=0)
    move = torch.bincount(draws[:, 8].long(), minlength=3).float() / len(draws)
    torch.testing.assert_close(move, torch.softmax(params[15:18], 0), atol=0.01, rtol=0)
    mode = dist.mode(params)
    assert mode.tolist() == [0.5, -0.5, 1.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]  # a tie (0) is off


def test_the_last_action_encoding():
    spec = action_spec_of(COMPOSITE)
    action = torch.tensor([[0.3, -9.0, 1.0, 0.0, 0.0, 1.0, 1.0, 4.0, 2.0]])
    encoded = ActionDistribution(spec).encode(action)
    want = [math.tanh(0.3), math.tanh(-9.0), 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1]
    assert encoded[0].tolist() == pytest.approx(want)
    scalar = ActionDistribution(ActionSpec.categorical(3)).encode(torch.tensor([2, 0]))
    assert scalar.tolist() == [[0, 0, 1], [1, 0, 0]]


def test_gaussian_samples_reach_the_bounds_by_clip_or_tanh():
    spec = ActionSpec(
        (ActionComponent("gaussian", 3, "", (-2.0, 0.0, -math.inf), (2.0, 10.0, math.inf)),)
    )
    u = np.array([0.5, -3.0, 7.0])
    assert spec.env_values(u, "clip").tolist() == pytest.approx([1.0, 0.0, 7.0])
    tanh = [2 * math.tanh(0.5), 5 * (math.tanh(-3.0) + 1), 7.0]
    assert spec.env_values(u, "tanh").tolist() == pytest.approx(tanh)
    with pytest.raises(ValueError, match="'squash'; allowed: clip, tanh"):
        spec.env_values(u, "squash")


class Recorder(gymnasium.Env):
    """Records the native actions it is given; one-step episodes."""

    def __init__(self, action_space: spaces.Space) -> None:
        self.observation_space = spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = action_space
        self.actions: list[Any] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("bounds", ["clip", "tanh"])
def test_each_env_of_a_batch_gets_its_native_action(bounds):
    envs = [Recorder(COMPOSITE) for _ in range(2)]
    batch = SerialEnvs([lambda e=e: e for e in envs], seeds=[0, 1], action_bounds=bounds)
    assert batch.obs_spec.actions == action_spec_of(COMPOSITE)
    batch.reset()
    # aim (2 samples), buttons (4 bits), gear (2 indices), move (1 index)
    actions = np.array([[0.0, 5.0, 1, 0, 1, 1, 1, 4, 0], [-0.5, -5.0, 0, 0, 0, 0, 0, 0, 2]])
    batch.step(actions)
    first, second = envs[0].actions[0], envs[1].actions[0]
    assert first["move"] == -1 and second["move"] == 1  # Discrete(3, start=-1)
    assert first["buttons"].tolist() == [1, 0, 1, 1] and first["buttons"].dtype == np.int8
    assert first["gear"].tolist() == [1, 4] and second["gear"].tolist() == [0, 0]
    aim = [float(first["aim"][0]), float(first["aim"][1]), float(second["aim"][1])]
    if bounds == "clip":
        assert aim == pytest.approx([0.0, 10.0, 0.0])
    else:
        want = [0.0, 5 * (math.tanh(5.0) + 1), 5 * (math.tanh(-5.0) + 1)]
        assert aim == pytest.approx(want, rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match=r"actions must have shape \(2, 9\)"):
        batch.step(np.zeros(2))


def test_multidiscrete_and_discrete_offsets_reach_the_env():
    md = spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, 1], [-2, 0]]))
    to_native = native_action(md)
    got = to_native(np.array([1, 2, 0, 4]))
    assert got.tolist() == [[2, 3], [-2, 4]] and md.contains(got)
    assert native_action(spaces.Discrete(3, start=-1))(np.int64(2)) == 1


def test_random_actions_fit_the_spec_and_the_obs_spec_carries_it():
    spec = action_spec_of(COMPOSITE)
    actions = random_actions(spec, (4, 3))
    assert actions.shape == (4, 3, 9) and actions.dtype == torch.float32
    obs = obs_spec_of(spaces.Box(-1, 1, (2,), np.float32), COMPOSITE)
    assert obs.actions == spec
    with pytest.raises(ValueError, match="not one set of discrete actions"):
        _ = obs.num_actions


def test_gaussian_stats_are_the_log_std_the_mean_size_and_the_samples_past_the_bounds():
    """`gaussian_stats` over the Gaussian dimensions only (the categorical's logits and index
    are left out), written out by hand; a spec with no Gaussian has none."""
    spec = action_spec_of(spaces.Tuple([spaces.Discrete(3), spaces.Box(-2, 2, (2,), np.float32)]))
    dist = ActionDistribution(spec)
    # two steps: logits (3), means (2), log-stds (2)
    params = torch.tensor(
        [[9.0, 9.0, 9.0, 0.5, -2.0, -1.0, 0.0], [9.0, 9.0, 9.0, 1.5, 0.0, -3.0, 1.0]]
    )
    actions = torch.tensor([[2.0, 0.2, -1.5], [0.0, 1.0, 3.0]])
    stats = dist.gaussian_stats(params, actions)
    torch.testing.assert_close(stats["policy/log_std_mean"], torch.tensor((-1 + 0 - 3 + 1) / 4))
    torch.testing.assert_close(stats["policy/mean_abs"], torch.tensor((0.5 + 2 + 1.5 + 0) / 4))
    # |u| > 1: -1.5 and 3.0 (1.0 is on the bound)
    torch.testing.assert_close(stats["policy/beyond_bounds"], torch.tensor(2 / 4))
    assert (
        ActionDistribution(ActionSpec.categorical(4)).gaussian_stats(params[:, :4], actions) == {}
    )
