"""The resetting LSTM core: fast (stretches) path, step path and a from-the-equations reference."""

from __future__ import annotations

import pytest
import torch

from gazelle.models.core import LSTMCore


def reference_core(
    core: LSTMCore, inputs: torch.Tensor, done: torch.Tensor, state: tuple
) -> tuple[torch.Tensor, tuple]:
    """The LSTM equations step by step, resetting `(h, c)` to zero before each done step."""
    w_ih, w_hh = core.lstm.weight_ih_l0, core.lstm.weight_hh_l0
    bias = core.lstm.bias_ih_l0 + core.lstm.bias_hh_l0
    h, c = state
    outputs = []
    for t in range(inputs.shape[0]):
        keep = (~done[t]).float().unsqueeze(-1)
        h, c = h * keep, c * keep
        gates = inputs[t] @ w_ih.T + h @ w_hh.T + bias
        i, f, g, o = gates.chunk(4, dim=-1)  # torch's gate order
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs), (h, c)


def random_case(num_steps: int, batch: int, done_prob: float, seed: int):
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_steps, batch, 12, generator=gen)
    done = torch.rand(num_steps, batch, generator=gen) < done_prob
    state = (torch.randn(batch, 16, generator=gen), torch.randn(batch, 16, generator=gen))
    return inputs, done, state


@pytest.mark.parametrize("done_prob", [0.0, 0.15, 0.5, 1.0])
@pytest.mark.parametrize("fast", [True, False])
def test_core_equals_reference(done_prob, fast):
    torch.manual_seed(0)
    core = LSTMCore(12, 16)
    inputs, done, state = random_case(9, 5, done_prob, seed=1)
    out, (h, c) = core(inputs, done, state, fast=fast)
    ref_out, (ref_h, ref_c) = reference_core(core, inputs, done, state)
    assert out.shape == (9, 5, 16)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c, ref_c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_step_path(seed):
    torch.manual_seed(seed)
    core = LSTMCore(12, 16)
    inputs, done, state = random_case(20, 4, 0.1, seed=seed)
    done[0, 0] = True  # a reset at the very first step as well
    fast_out, fast_state = core(inputs, done, state, fast=True)
    step_out, step_state = core(inputs, done, state, fast=False)
    torch.testing.assert_close(fast_out, step_out, rtol=1e-6, atol=1e-6)
    for a, b in zip(fast_state, step_state):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_fast_path_runs_one_lstm_call_per_stretch():
    core = LSTMCore(12, 16)
    calls = []
    core.lstm.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    inputs, _, state = random_case(10, 3, 0.0, seed=0)
    done = torch.zeros(10, 3, dtype=torch.bool)
    core(inputs, done, state)
    assert calls == [10]
    calls.clear()
    done[4, 1] = done[7, 0] = done[7, 2] = True
    core(inputs, done, state)
    assert calls == [4, 3, 3]
    calls.clear()
    done[5, 0] = True  # stretches of 4, 1, 2, 3 steps: the one-step stretch is the cell's
    core(inputs, done, state)
    assert calls == [4, 2, 3]


def test_one_step_is_the_cells_equations_with_nn_lstms_values_and_gradients():
    """An actor's step (T = 1) makes no `nn.LSTM` call; its outputs, state and the
    gradients to every weight and input equal the `nn.LSTM` path's (the reference)."""
    torch.manual_seed(0)
    core = LSTMCore(12, 16)
    calls = []
    core.lstm.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    results = []
    for fast in (True, False):
        inputs, done, state = random_case(1, 5, 0.4, seed=3)
        inputs.requires_grad_(True)
        core.zero_grad()
        out, (h, c) = core(inputs, done, state, fast=fast)
        (out.square().sum() + c.sum()).backward()
        grads = [inputs.grad, *(w.grad for w in core.lstm.parameters())]
        results.append((out, h, c, grads))
    assert calls == [1]  # the reference's call only
    (out, h, c, grads), (ref_out, ref_h, ref_c, ref_grads) = results
    torch.testing.assert_close(out, ref_out, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close((h, c), (ref_h, ref_c), rtol=1e-6, atol=1e-6)
    for grad, ref in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref, rtol=1e-5, atol=1e-6)


def test_done_resets_to_the_initial_state():
    torch.manual_seed(0)
    core = LSTMCore(12, 16)
    inputs, _, state = random_case(3, 2, 0.0, seed=0)
    done = torch.tensor([[True, False], [False, False], [False, False]])
    out, _ = core(inputs, done, state)
    fresh_out, _ = core(inputs[:, :1], done[:, :1], core.initial_state(1))
    torch.testing.assert_close(out[:, 0], fresh_out[:, 0])
    other, _ = core(inputs, torch.zeros_like(done), state)
    assert not torch.allclose(out[:, 0], other[:, 0])  # without the reset it differs
    torch.testing.assert_close(out[:, 1], other[:, 1])  # the other element is untouched


def test_initial_state_shapes():
    core = LSTMCore(12, 16)
    h, c = core.initial_state(3)
    assert h.shape == c.shape == (3, 16)
    assert h.dtype == torch.float32 and not h.any() and not c.any()
    assert h.data_ptr() != c.data_ptr()


def test_core_runs_in_float32_under_autocast():
    core = LSTMCore(12, 16)
    inputs, done, state = random_case(5, 2, 0.2, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h, c) = core(inputs.bfloat16(), done, state)
    assert out.dtype == h.dtype == c.dtype == torch.float32
    ref, _ = core(inputs.bfloat16().float(), done, state)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("fast", [True, False])
def test_the_input_norm_is_a_layer_norm_before_the_lstm_equations(fast):
    """With `input_norm`, each step's input is `(x - mean) / sqrt(var + eps) * w + b` over its
    features (the layer norm's formula), then the same equations."""
    torch.manual_seed(2)
    core = LSTMCore(12, 16, input_norm=True)
    assert core.input_norm is not None
    with torch.no_grad():
        core.input_norm.weight.uniform_(0.5, 1.5)
        core.input_norm.bias.uniform_(-0.3, 0.3)
    inputs, done, state = random_case(9, 5, 0.2, seed=4)
    mean = inputs.mean(-1, keepdim=True)
    var = inputs.var(-1, unbiased=False, keepdim=True)
    normed = (inputs - mean) / torch.sqrt(var + core.input_norm.eps)
    normed = normed * core.input_norm.weight + core.input_norm.bias
    expected, (h, c) = reference_core(core, normed, done, state)
    out, (h2, c2) = core(inputs, done, state, fast=fast)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close((h2, c2), (h, c), rtol=1e-5, atol=1e-5)


def test_a_grown_input_saturates_the_gates_unless_it_is_normed():
    """The deep LSTM's stall in a fast form: Pong's torso output grew ~600x under Adam
    (docs/notes/lstm.md). Fed an input 600x its scale, the plain core's gates saturate; with
    the input norm its outputs and gates are those of the input at its first scale."""
    from gazelle.runtime.unit_health import saturated_gates

    def share(core: LSTMCore, inputs: torch.Tensor) -> float:
        with torch.no_grad():
            x = core.input_norm(inputs) if core.input_norm is not None else inputs
            h0 = torch.zeros(1, inputs.shape[1], 16)
            out, _ = core.lstm(x, (h0, torch.zeros_like(h0)))
            count, total = saturated_gates(core.lstm, x, h0, out)
        return float(count) / total

    torch.manual_seed(3)
    inputs = torch.relu(torch.randn(20, 8, 12)) * 0.35  # a fresh ReLU torso's scale
    done = torch.zeros(20, 8, dtype=torch.bool)
    state = (torch.zeros(8, 16), torch.zeros(8, 16))
    plain, normed = LSTMCore(12, 16), LSTMCore(12, 16, input_norm=True)
    assert share(plain, inputs) < 0.05
    assert share(plain, inputs * 600) > 0.5
    assert share(normed, inputs * 600) == pytest.approx(share(normed, inputs), abs=0.01)
    with torch.no_grad():
        small, _ = normed(inputs, done, state)
        grown, _ = normed(inputs * 600, done, state)
    torch.testing.assert_close(grown, small, rtol=1e-3, atol=1e-3)


def test_the_flag_reaches_the_agent_and_a_run_saved_before_it_has_no_norm():
    """`--core-input-norm` builds every copy of the agent with the norm before its core (a
    feed-forward agent has no core to norm); a saved config without the field (a run from
    before it) is read as what that run did, no norm, whatever a newer preset says."""
    import numpy as np

    from gazelle.algorithms.runstate import saved_config
    from gazelle.config import Config
    from gazelle.models import build_agent
    from gazelle.types import ObsSpec

    spec = ObsSpec((4,), np.dtype(np.float32), num_actions=2)
    config = Config.of(env="CartPole-v1", use_lstm=True, core_input_norm=True)
    agent = build_agent(spec, "mlp", True, **config.model.agent_options())
    assert agent.core is not None and agent.core.input_norm is not None
    assert any(name.startswith("core.input_norm.") for name in agent.state_dict())
    plain = build_agent(spec, "mlp", True, **Config.of(env="CartPole-v1").model.agent_options())
    assert plain.core is not None and plain.core.input_norm is None
    data = config.to_dict()
    data["model"].pop("core_input_norm")
    assert saved_config(data).model.core_input_norm is False
    assert saved_config(config.to_dict()).model.core_input_norm is True


def test_the_image_presets_norm_the_core_input_and_the_seeds_agents_do_not():
    from gazelle.config import Config, resolve
    from gazelle.envs.probe import probe

    catch, cartpole = probe("gazelle/Catch-v0"), probe("CartPole-v1")
    for algo in ("impala", "appo"):
        config = resolve(Config.of(algo=algo, env="gazelle/Catch-v0"), catch)
        assert config.model.use_lstm is True and config.model.core_input_norm is True
        seed = resolve(Config.of(algo=algo, env="gazelle/Catch-v0", preset="impala-paper"), catch)
        assert seed.model.core_input_norm is False
        vector = resolve(Config.of(algo=algo, env="CartPole-v1", use_lstm=True), cartpole)
        assert vector.model.core_input_norm is False  # a tanh MLP bounds the core's input
    a3c = resolve(Config.of(algo="a3c", env="gazelle/Catch-v0"), catch)
    assert not a3c.model.core_input_norm  # the starter agent's core
