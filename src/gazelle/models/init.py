"""The IMPALA seed's initialisation (Sonnet 1's defaults), applied to a torch module.

- convolutions and linear layers: weights from a normal with stddev `1 / sqrt(fan_in)`,
  truncated at two standard deviations; biases zero;
- LSTMs (Sonnet's `snt.LSTM`, one linear map of `[input, h]` to the four gates): weights
  truncated normal with stddev `1 / sqrt(input_size + hidden_size)`, biases zero, and the
  forget gate's bias 1 (Sonnet adds `forget_bias=1.0` to the forget gate).

torch's defaults (uniform in `+-1/sqrt(fan_in)`, biases too) give weights about 0.6x as large
and random biases: on Pong frames 40-60% of the shallow torso's ReLUs were then dead on every
frame and its features varied across frames by ~7e-4 per unit (issue 10's measurements).
Embeddings keep torch's default (normal, stddev 1).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _truncated_normal_(tensor: torch.Tensor, std: float) -> None:
    nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-2.0 * std, b=2.0 * std)


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
                    elif name.startswith("bias_ih"):
                        param.zero_()
                        # why: torch orders the gates (input, forget, cell, output).
                        param[hidden : 2 * hidden] = 1.0
                    elif name.startswith("bias_hh"):
                        param.zero_()
    return module
