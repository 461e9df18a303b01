"""V-trace against a slow reference written from the paper's equation, plus properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gazelle.losses import returns, vtrace

T, B, A = 6, 3, 4


def reference_vtrace(
    log_rhos: np.ndarray,
    discounts: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 numpy, `[T, B]`, straight from IMPALA eq. (1) with per-step discounts:

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{k=s}^{t-1} gamma_k) (prod_{i=s}^{t-1} c_i) delta_t V,
    delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),  c_i = lambda min(1, rho_i),
    pg_s = rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)),  V(x_T) = v_T = bootstrap.
    """
    n_steps, batch = rewards.shape
    rhos = np.exp(log_rhos)
    rho_bar = rhos if clip_rho_threshold is None else np.minimum(clip_rho_threshold, rhos)
    rho_pg = rhos if clip_pg_rho_threshold is None else np.minimum(clip_pg_rho_threshold, rhos)
    cs = lambda_ * np.minimum(1.0, rhos)
    values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)
    vs = np.zeros((n_steps, batch))
    for b in range(batch):
        for s in range(n_steps):
            total = values[s, b]
            for t in range(s, n_steps):
                weight = np.prod(discounts[s:t, b]) * np.prod(cs[s:t, b])
                delta = rho_bar[t, b] * (
                    rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values[t, b]
                )
                total += weight * delta
            vs[s, b] = total
    vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
    pg_advantages = rho_pg * (rewards + discounts * vs_ext[1:] - values)
    return vs, pg_advantages


def make_inputs(seed: int, log_rho_range: float = 2.0, episode_ends: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    discounts = np.full((T, B), 0.9)
    if episode_ends:
        discounts *= rng.random((T, B)) > 0.25
    return {
        "log_rhos": rng.uniform(-log_rho_range, log_rho_range, (T, B)),
        "discounts": discounts,
        "rewards": rng.normal(size=(T, B)),
        "values": rng.normal(size=(T, B)),
        "bootstrap_value": rng.normal(size=B),
    }


def run_vtrace(inputs: dict, **kwargs) -> vtrace.VTraceReturns:
    tensors = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    return vtrace.from_importance_weights(**tensors, **kwargs)


def assert_close(actual: torch.Tensor, expected: np.ndarray, **tol) -> None:
    np.testing.assert_allclose(actual.numpy(), expected, rtol=tol.get("rtol", 1e-10), atol=1e-10)


@pytest.mark.parametrize(
    ("clip_rho", "clip_pg_rho", "lambda_"),
    [(1.0, 1.0, 1.0), (2.0, 0.5, 1.0), (None, None, 1.0), (1.0, 1.0, 0.5), (None, 1.5, 0.8)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_paper_reference(clip_rho, clip_pg_rho, lambda_, seed):
    inputs = make_inputs(seed)
    kwargs = {
        "clip_rho_threshold": clip_rho,
        "clip_pg_rho_threshold": clip_pg_rho,
        "lambda_": lambda_,
    }
    out = run_vtrace(inputs, **kwargs)
    vs, pg = reference_vtrace(**inputs, **kwargs)
    assert_close(out.vs, vs)
    assert_close(out.pg_advantages, pg)


def test_on_policy_is_n_step_return():
    inputs = make_inputs(2, episode_ends=False)
    inputs["log_rhos"] = np.zeros((T, B))
    gamma = 0.9
    out = run_vtrace(inputs)
    expected = np.zeros((T, B))
    for s in range(T):
        expected[s] = gamma ** (T - s) * inputs["bootstrap_value"]
        for t in range(s, T):
            expected[s] += gamma ** (t - s) * inputs["rewards"][t]
    assert_close(out.vs, expected)
    # On-policy, r_s + gamma v_{s+1} = v_s, so the policy-gradient advantage is v_s - V(x_s).
    assert_close(out.pg_advantages, expected - inputs["values"])
    # ... and both agree with the A3C returns (GAE with lambda = 1).
    advantages, discounted = returns.gae(
        torch.as_tensor(inputs["rewards"]),
        torch.as_tensor(inputs["values"]),
        torch.as_tensor(inputs["bootstrap_value"]),
        gamma=gamma,
        lambda_=1.0,
    )
    assert_close(out.vs, discounted.numpy())
    assert_close(out.pg_advantages, advantages.numpy())


@pytest.mark.parametrize("cut", [0, 2, 4])
def test_cutting_at_episode_end_changes_nothing(cut):
    inputs = make_inputs(3, episode_ends=False)
    inputs["discounts"][cut] = 0.0  # step `cut` ends an episode
    full = run_vtrace(inputs)
    prefix = {k: v[: cut + 1] for k, v in inputs.items() if k != "bootstrap_value"}
    prefix["bootstrap_value"] = np.full(B, 1234.5)  # anything: the discount at the cut is 0
    head = run_vtrace(prefix)
    assert_close(head.vs, full.vs[: cut + 1].numpy())
    assert_close(head.pg_advantages, full.pg_advantages[: cut + 1].numpy())
    suffix = {k: v[cut + 1 :] for k, v in inputs.items() if k != "bootstrap_value"}
    suffix["bootstrap_value"] = inputs["bootstrap_value"]
    tail = run_vtrace(suffix)
    assert_close(tail.vs, full.vs[cut + 1 :].numpy())
    assert_close(tail.pg_advantages, full.pg_advantages[cut + 1 :].numpy())


def test_gamma_zero_gives_one_step_targets():
    inputs = make_inputs(4)
    inputs["discounts"] = np.zeros((T, B))
    r, v = inputs["rewards"], inputs["values"]
    rho_clipped = np.minimum(1.0, np.exp(inputs["log_rhos"]))
    out = run_vtrace(inputs)
    assert_close(out.vs, v + rho_clipped * (r - v))
    assert_close(out.pg_advantages, rho_clipped * (r - v))
    inputs["log_rhos"] = np.zeros((T, B))  # on-policy: vs is the reward itself
    assert_close(run_vtrace(inputs).vs, r)


def test_lambda_zero_gives_one_step_targets():
    # With lambda = 0 every trace coefficient c_i is 0, so only the t = s term of the sum
    # survives: v_s = V_s + rho_bar_s (r_s + gamma_s V_{s+1} - V_s). The policy-gradient
    # advantage still bootstraps from v_{s+1} (itself a one-step target), v_T = bootstrap.
    inputs = make_inputs(5)
    r, v, g = inputs["rewards"], inputs["values"], inputs["discounts"]
    boot = inputs["bootstrap_value"]
    rho_clipped = np.minimum(1.0, np.exp(inputs["log_rhos"]))
    v_next = np.concatenate([v[1:], boot[None]])
    vs = v + rho_clipped * (r + g * v_next - v)
    vs_next = np.concatenate([vs[1:], boot[None]])
    out = run_vtrace(inputs, lambda_=0.0)
    assert_close(out.vs, vs)
    assert_close(out.pg_advantages, rho_clipped * (r + g * vs_next - v))


def test_huge_ratios_hit_the_clips():
    inputs = make_inputs(6)
    on_policy = run_vtrace({**inputs, "log_rhos": np.zeros((T, B))})
    # rho = e^10: clipped to 1 in delta, in c and in the pg weight: the on-policy result.
    huge = run_vtrace({**inputs, "log_rhos": np.full((T, B), 10.0)})
    assert_close(huge.vs, on_policy.vs.numpy())
    assert_close(huge.pg_advantages, on_policy.pg_advantages.numpy())
    # Other thresholds: rho_bar = 3 and rho_pg = 0.5 everywhere, c still min(1, rho) = 1.
    clipped = run_vtrace(
        {**inputs, "log_rhos": np.full((T, B), 10.0)},
        clip_rho_threshold=3.0,
        clip_pg_rho_threshold=0.5,
    )
    vs, pg = reference_vtrace(
        **{**inputs, "log_rhos": np.full((T, B), np.log(3.0))},
        clip_rho_threshold=None,
        clip_pg_rho_threshold=None,
    )
    assert_close(clipped.vs, vs)
    assert_close(clipped.pg_advantages, pg / 3.0 * 0.5)


def test_tiny_ratios_give_the_values_and_no_advantage():
    inputs = make_inputs(7)
    tiny = run_vtrace({**inputs, "log_rhos": np.full((T, B), -40.0)})
    np.testing.assert_allclose(tiny.vs.numpy(), inputs["values"], atol=1e-12)
    np.testing.assert_allclose(tiny.pg_advantages.numpy(), 0.0, atol=1e-12)


def test_mixed_extreme_ratios_match_reference_with_manual_clipping():
    inputs = make_inputs(8)
    inputs["log_rhos"] = np.where(np.random.default_rng(8).random((T, B)) > 0.5, 8.0, -8.0)
    for clip_rho, clip_pg in [(1.0, 1.0), (2.0, 0.3)]:
        out = run_vtrace(inputs, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg)
        vs, pg = reference_vtrace(
            **inputs, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg
        )
        assert_close(out.vs, vs)
        assert_close(out.pg_advantages, pg)


def test_none_thresholds_do_not_clip():
    inputs = make_inputs(9)
    inputs["log_rhos"] = np.abs(inputs["log_rhos"]) + 0.3  # every rho > 1
    unclipped = run_vtrace(inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None)
    vs, pg = reference_vtrace(**inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None)
    assert_close(unclipped.vs, vs)
    assert_close(unclipped.pg_advantages, pg)
    clipped = run_vtrace(inputs)
    assert not torch.allclose(unclipped.vs, clipped.vs)
    assert not torch.allclose(unclipped.pg_advantages, clipped.pg_advantages)


def test_from_logits_equals_from_importance_weights():
    rng = np.random.default_rng(10)
    inputs = make_inputs(10)
    behaviour = rng.normal(size=(T, B, A))
    target = rng.normal(size=(T, B, A))
    actions = rng.integers(0, A, size=(T, B))

    def log_softmax_at(logits: np.ndarray) -> np.ndarray:
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        return np.take_along_axis(log_probs, actions[..., None], -1)[..., 0]

    target_lp, behaviour_lp = log_softmax_at(target), log_softmax_at(behaviour)
    out = vtrace.from_logits(
        behaviour_policy_logits=torch.as_tensor(behaviour),
        target_policy_logits=torch.as_tensor(target),
        actions=torch.as_tensor(actions),
        **{k: torch.as_tensor(v) for k, v in inputs.items() if k != "log_rhos"},
        clip_rho_threshold=1.5,
    )
    assert_close(out.target_action_log_probs, target_lp)
    assert_close(out.behaviour_action_log_probs, behaviour_lp)
    assert_close(out.log_rhos, target_lp - behaviour_lp)
    vs, pg = reference_vtrace(
        **{**inputs, "log_rhos": target_lp - behaviour_lp}, clip_rho_threshold=1.5
    )
    assert_close(out.vs, vs)
    assert_close(out.pg_advantages, pg)


def test_no_gradient_through_targets():
    rng = np.random.default_rng(11)
    inputs = make_inputs(11)
    target = torch.tensor(rng.normal(size=(T, B, A)), requires_grad=True)
    values = torch.tensor(inputs["values"], requires_grad=True)
    bootstrap = torch.tensor(inputs["bootstrap_value"], requires_grad=True)
    out = vtrace.from_logits(
        behaviour_policy_logits=torch.as_tensor(rng.normal(size=(T, B, A))),
        target_policy_logits=target,
        actions=torch.as_tensor(rng.integers(0, A, size=(T, B))),
        discounts=torch.as_tensor(inputs["discounts"]),
        rewards=torch.as_tensor(inputs["rewards"]),
        values=values,
        bootstrap_value=bootstrap,
    )
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    assert out.target_action_log_probs.requires_grad  # the log-probs keep theirs
    # A loss mixing targets and values: the values' gradient is the targets, nothing more.
    ((out.vs + out.pg_advantages) * values).sum().backward()
    torch.testing.assert_close(values.grad, out.vs + out.pg_advantages)
    assert bootstrap.grad is None
    assert target.grad is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_is_kept(dtype):
    inputs = make_inputs(12)
    tensors = {k: torch.as_tensor(v, dtype=dtype) for k, v in inputs.items()}
    out = vtrace.from_importance_weights(**tensors)
    assert out.vs.dtype == dtype and out.pg_advantages.dtype == dtype
    vs, pg = reference_vtrace(**inputs)
    np.testing.assert_allclose(out.vs.double().numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.double().numpy(), pg, rtol=1e-5, atol=1e-5)


def test_half_precision_inputs_are_computed_in_float32():
    inputs = make_inputs(13)
    tensors = {k: torch.as_tensor(v, dtype=torch.bfloat16) for k, v in inputs.items()}
    assert vtrace.from_importance_weights(**tensors).vs.dtype == torch.float32


def test_single_rollout_without_batch_dimension():
    inputs = make_inputs(14)
    column = {k: v[..., 0] for k, v in inputs.items()}
    out = run_vtrace(column)
    vs, pg = reference_vtrace(**inputs)
    assert_close(out.vs, vs[:, 0])
    assert_close(out.pg_advantages, pg[:, 0])


@pytest.mark.parametrize(
    ("name", "bad_shape", "pattern"),
    [
        ("values", (T, B + 1), r"`values` has shape \[6, 4\], expected \[6, 3\]"),
        ("bootstrap_value", (T,), r"`bootstrap_value` has shape \[6\], expected \[3\]"),
        ("discounts", (T - 1, B), r"`discounts` has shape \[5, 3\] but `log_rhos` has shape"),
        ("rewards", (T, B, 1), r"`rewards` has shape \[6, 3, 1\]"),
    ],
)
def test_mismatched_shapes_raise(name, bad_shape, pattern):
    tensors = {k: torch.as_tensor(v) for k, v in make_inputs(15).items()}
    tensors[name] = torch.zeros(bad_shape, dtype=torch.float64)
    with pytest.raises(ValueError, match=pattern):
        vtrace.from_importance_weights(**tensors)


def test_from_logits_bad_inputs_raise():
    inputs = {k: torch.as_tensor(v) for k, v in make_inputs(16).items() if k != "log_rhos"}
    logits = torch.zeros(T, B, A, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"`behaviour_policy_logits` has shape \[6, 3, 5\]"):
        vtrace.from_logits(
            logits.new_zeros(T, B, A + 1), logits, torch.zeros(T, B, dtype=torch.int64), **inputs
        )
    with pytest.raises(ValueError, match=r"`actions` has shape \[6\], expected \[6, 3\]"):
        vtrace.from_logits(logits, logits, torch.zeros(T, dtype=torch.int64), **inputs)
    with pytest.raises(ValueError, match=r"`actions` must hold integers"):
        vtrace.from_logits(logits, logits, torch.zeros(T, B), **inputs)


def test_non_float_and_mixed_device_inputs_raise():
    tensors = {k: torch.as_tensor(v) for k, v in make_inputs(17).items()}
    with pytest.raises(ValueError, match=r"`rewards` must be floating point"):
        vtrace.from_importance_weights(
            **{**tensors, "rewards": torch.zeros(T, B, dtype=torch.int64)}
        )
    with pytest.raises(ValueError, match=r"`values` is on meta"):
        vtrace.from_importance_weights(**{**tensors, "values": tensors["values"].to("meta")})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    inputs = make_inputs(18)
    cpu = run_vtrace(inputs)
    for dtype in (torch.float32, torch.float64):
        tensors = {k: torch.as_tensor(v, dtype=dtype, device="cuda") for k, v in inputs.items()}
        out = vtrace.from_importance_weights(**tensors)
        assert out.vs.device.type == "cuda" and out.vs.dtype == dtype
        torch.testing.assert_close(out.vs.cpu().double(), cpu.vs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            out.pg_advantages.cpu().double(), cpu.pg_advantages, rtol=1e-5, atol=1e-5
        )
