"""Discounted returns and GAE against the A3C seed's `process_rollout`, written out as loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gazelle.losses.returns import discount, gae


def seed_process_rollout(
    rewards: list[float], values: list[float], r: float, gamma: float, lambda_: float
) -> tuple[np.ndarray, np.ndarray]:
    """The seed's arithmetic with explicit loops: returns `(batch_adv, batch_r)`.

    batch_r = discount(rewards + [r], gamma)[:-1]
    delta_t = rewards + gamma * vpred_t[1:] - vpred_t[:-1]   with vpred_t = values + [r]
    batch_adv = discount(delta_t, gamma * lambda_)
    """
    rewards_plus_v = [*rewards, r]
    vpred = [*values, r]
    n = len(rewards)
    batch_r = np.zeros(n)
    for t in range(n):
        batch_r[t] = sum(gamma**k * rewards_plus_v[t + k] for k in range(n + 1 - t))
    delta = [rewards[t] + gamma * vpred[t + 1] - vpred[t] for t in range(n)]
    batch_adv = np.zeros(n)
    for t in range(n):
        batch_adv[t] = sum((gamma * lambda_) ** k * delta[t + k] for k in range(n - t))
    return batch_adv, batch_r


def test_discount_numpy_matches_loop():
    x = np.array([1.0, -2.0, 0.5, 3.0])
    expected = [sum(0.9**k * x[t + k] for k in range(len(x) - t)) for t in range(len(x))]
    out = discount(x, 0.9)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_discount_torch_2d_along_time_and_same_kind():
    x = torch.tensor([[1.0, 2.0], [0.0, -1.0], [4.0, 0.5]], dtype=torch.float64)
    out = discount(x, 0.5)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    expected = torch.tensor(
        [
            [1.0 + 0.5 * 0.0 + 0.25 * 4.0, 2.0 - 0.5 + 0.25 * 0.5],
            [0.0 + 2.0, -1.0 + 0.25],
            [4.0, 0.5],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(out, expected)


def test_discount_integers_become_float():
    out = discount(np.array([1, 1, 1]), 0.5)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [1.75, 1.5, 1.0])
    assert discount(torch.tensor([1, 1]), 0.5).is_floating_point()


@pytest.mark.parametrize("lambda_", [0.0, 0.95, 1.0])
@pytest.mark.parametrize("bootstrap", [0.0, 1.7])
def test_gae_matches_seed_for_one_rollout(lambda_, bootstrap):
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=7)
    values = rng.normal(size=7)
    gamma = 0.99
    expected_adv, expected_r = seed_process_rollout(
        list(rewards), list(values), bootstrap, gamma, lambda_
    )
    adv, ret = gae(rewards, values, bootstrap, gamma, lambda_)
    assert isinstance(adv, np.ndarray) and isinstance(ret, np.ndarray)
    np.testing.assert_allclose(adv, expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret, expected_r, rtol=1e-12, atol=1e-12)
    adv_t, ret_t = gae(
        torch.as_tensor(rewards),
        torch.as_tensor(values),
        torch.tensor(bootstrap, dtype=torch.float64),
        gamma,
        lambda_,
    )
    assert isinstance(adv_t, torch.Tensor) and adv_t.dtype == torch.float64
    np.testing.assert_allclose(adv_t.numpy(), expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret_t.numpy(), expected_r, rtol=1e-12, atol=1e-12)


def test_lambda_limits():
    rng = np.random.default_rng(1)
    rewards, values = (
        torch.as_tensor(rng.normal(size=(5, 2))),
        torch.as_tensor(rng.normal(size=(5, 2))),
    )
    bootstrap = torch.as_tensor(rng.normal(size=2))
    adv1, ret = gae(rewards, values, bootstrap, 0.9, 1.0)
    torch.testing.assert_close(adv1, ret - values)  # Monte-Carlo advantage
    adv0, _ = gae(rewards, values, bootstrap, 0.9, 0.0)
    next_values = torch.cat([values[1:], bootstrap[None]])
    torch.testing.assert_close(adv0, rewards + 0.9 * next_values - values)  # TD errors


def test_time_major_with_dones_matches_per_episode_segments():
    rng = np.random.default_rng(2)
    n_steps, batch, gamma, lambda_ = 9, 4, 0.95, 0.9
    rewards = rng.normal(size=(n_steps, batch))
    values = rng.normal(size=(n_steps, batch))
    bootstrap = rng.normal(size=batch)
    dones = np.zeros((n_steps, batch), dtype=bool)
    dones[[2, 5], 0] = True  # two ends inside the unroll
    dones[[0, 8], 1] = True  # an end at the first step and at the last
    dones[4, 2] = True  # one end; column 3 has none
    adv, ret = gae(
        torch.as_tensor(rewards),
        torch.as_tensor(values),
        torch.as_tensor(bootstrap),
        gamma,
        lambda_,
        dones=torch.as_tensor(dones),
    )
    for b in range(batch):
        start = 0
        ends = [*np.flatnonzero(dones[:, b]), n_steps - 1]
        for end in ends:
            if end < start:
                continue
            # A segment that ended its episode has no bootstrap (the seed's r = 0).
            r = 0.0 if dones[end, b] else bootstrap[b]
            seg = slice(start, end + 1)
            exp_adv, exp_r = seed_process_rollout(
                list(rewards[seg, b]), list(values[seg, b]), r, gamma, lambda_
            )
            np.testing.assert_allclose(adv[seg, b].numpy(), exp_adv, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(ret[seg, b].numpy(), exp_r, rtol=1e-12, atol=1e-12)
            start = end + 1


def test_done_at_last_step_ignores_bootstrap():
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.5], [0.25, 0.25]], dtype=torch.float64)
    dones = torch.tensor([[False, False], [True, False]])
    adv_a, ret_a = gae(rewards, values, torch.tensor([0.0, 0.0]), 0.5, 0.5, dones=dones)
    adv_b, ret_b = gae(rewards, values, torch.tensor([100.0, 100.0]), 0.5, 0.5, dones=dones)
    torch.testing.assert_close(adv_a[:, 0], adv_b[:, 0])
    torch.testing.assert_close(ret_a[:, 0], torch.tensor([2.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(ret_b[:, 0], ret_a[:, 0])
    # The column without a done does use it: R_1 = 2 + 0.5 * 100.
    torch.testing.assert_close(ret_b[:, 1], torch.tensor([27.0, 52.0], dtype=torch.float64))


def test_no_gradient_and_dtype_kept():
    rewards = torch.ones(3, 2)
    values = torch.zeros(3, 2, requires_grad=True)
    adv, ret = gae(rewards, values, torch.zeros(2), 0.9, 0.95)
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    assert not adv.requires_grad and not ret.requires_grad


def test_numpy_float32_stays_float32():
    adv, ret = gae(np.ones(3, dtype=np.float32), np.zeros(3, dtype=np.float32), 0.0, 0.9, 1.0)
    assert adv.dtype == np.float32 and ret.dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"values": torch.zeros(4, 2)}, r"`values` has shape \[4, 2\], expected \[4, 3\]"),
        ({"bootstrap_value": torch.zeros(4)}, r"`bootstrap_value` has shape \[4\], expected \[3\]"),
        ({"bootstrap_value": 0.0}, r"`bootstrap_value` has shape \[\], expected \[3\]"),
        ({"dones": torch.zeros(4, dtype=torch.bool)}, r"`dones` has shape \[4\]"),
    ],
)
def test_mismatched_shapes_raise(kwargs, pattern):
    args = {
        "rewards": torch.zeros(4, 3),
        "values": torch.zeros(4, 3),
        "bootstrap_value": torch.zeros(3),
        "gamma": 0.9,
        "lambda_": 1.0,
        **kwargs,
    }
    with pytest.raises(ValueError, match=pattern):
        gae(**args)
