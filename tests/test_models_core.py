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
