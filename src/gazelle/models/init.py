"""Initialisations: the IMPALA seed's (Sonnet 1's defaults, `seed_init`) and the A3C
starter agent's (`universe_init`), applied to a torch module.

`seed_init`:

- convolutions and linear layers: weights from a normal with stddev `1 / sqrt(fan_in)`,
  truncated at two standard deviations; biases zero;
- LSTMs (Sonnet's `snt.LSTM`, one linear map of `[input, h]` to the four gates): weights
  truncated normal with stddev `1 / sqrt(input_size + hidden_size)`, biases zero, and the
  forget gate's bias 1 (Sonnet adds `forget_bias=1.0` to the forget gate).

torch's defaults (uniform in `+-1/sqrt(fan_in)`, biases too) give weights about 0.6x as large
and random biases: on Pong frames 40-60% of the shallow torso's ReLUs were then dead on every
frame and its features varied across frames by ~7e-4 per unit (issue 10's measurements).
Embeddings keep torch's default (normal, stddev 1).

`universe_init`, the universe-starter-agent's (its model.py, TensorFlow):

- convolutions: uniform in `+-sqrt(6 / (fan_in + fan_out))` with `fan_in = in * kh * kw`
  and `fan_out = out * kh * kw` (its `conv2d`: Glorot-uniform over the filter), biases 0;
- the policy and value heads: "normalised columns": a standard normal matrix whose
  columns (TF's `[in, out]` layout; rows of torch's `[out, in]`) are scaled to L2 norm
  `std`, 0.01 for the logits and 1.0 for the value; biases 0;
- its LSTM (TF's `BasicLSTMCell`, created without an initializer, so TF's default for
  such variables, Glorot-uniform, over its one `[input + hidden, 4 * hidden]` kernel):
  uniform in `+-sqrt(6 / (input + hidden + 4 * hidden))`, biases 0, forget bias 1
  (`forget_bias=1.0`, added inside the cell). This part is TF's default, not written in
  the starter agent's code;
- other linear layers (the starter agent has none besides its heads: a `mlp` torso, the
  instruction encoder) get TF's default too, Glorot-uniform over `[in, out]`.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _truncated_normal_(tensor: torch.Tensor, std: float) -> None:
    nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-2.0 * std, b=2.0 * std)


def _lstm_bias_(name: str, param: torch.Tensor, hidden: int) -> None:
    """Both inits' LSTM biases: zero, but 1 for the forget gate (once, in `bias_ih`)."""
    param.zero_()
    if name.startswith("bias_ih"):
        # why: torch orders the gates (input, forget, cell, output).
        param[hidden : 2 * hidden] = 1.0


def seed_init(module: nn.Module) -> nn.Module:
    """Re-initialise every conv, linear and LSTM layer of `module` in place; returns it."""
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                fan_in = layer.weight[0].numel()
                _truncated_normal_(layer.weight, 1.0 / math.sqrt(fan_in))
                if layer.bias is not None:
                    layer.bias.zero_()
            elif isinstance(layer, nn.LSTM):
                hidden = layer.hidden_size
                for name, param in layer.named_parameters():
                    if name.startswith("weight_ih"):
                        std = 1.0 / math.sqrt(param.shape[1] + hidden)
                        _truncated_normal_(param, std)
                    elif name.startswith("weight_hh"):
                        _truncated_normal_(param, 1.0 / math.sqrt(layer.input_size + hidden))
                    elif name.startswith("bias_"):
                        _lstm_bias_(name, param, hidden)
    return module


def _glorot_uniform_(tensor: torch.Tensor, fan_in: int, fan_out: int) -> None:
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(tensor, -bound, bound)


def normalized_columns_(weight: torch.Tensor, std: float) -> None:
    """The starter agent's head init on a torch `[out, in]` weight: standard normal, each
    output unit's incoming weights (a row here, a column of TF's `[in, out]`) scaled to L2
    norm `std`."""
    nn.init.normal_(weight)
    weight.mul_(std / weight.pow(2).sum(dim=1, keepdim=True).sqrt())


def universe_init(module: nn.Module, policy: nn.Linear, baseline: nn.Linear) -> nn.Module:
    """Re-initialise `module` in place as the starter agent does (module docstring), with
    `policy` and `baseline` (layers of `module`) as its heads; returns `module`."""
    heads = {id(policy): 0.01, id(baseline): 1.0}
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                if id(layer) in heads:
                    normalized_columns_(layer.weight, heads[id(layer)])
                else:
                    # why: out * kh * kw and in * kh * kw (kernel dims are 1 for a linear).
                    receptive = layer.weight[0, 0].numel() if layer.weight.dim() > 2 else 1
                    out_channels, in_channels = layer.weight.shape[:2]
                    _glorot_uniform_(
                        layer.weight, in_channels * receptive, out_channels * receptive
                    )
                if layer.bias is not None:
                    layer.bias.zero_()
            elif isinstance(layer, nn.LSTM):
                hidden = layer.hidden_size
                for name, param in layer.named_parameters():
                    if name.startswith("weight_"):
                        # why: TF's one kernel over [input, h]: both torch matrices are its
                        # parts, with its fans (input + hidden in, 4 * hidden out).
                        inputs = layer.input_size if name.endswith("_l0") else hidden
                        _glorot_uniform_(param, inputs + hidden, 4 * hidden)
                    elif name.startswith("bias_"):
                        _lstm_bias_(name, param, hidden)
    return module
