"""Per layer group: the share of dead ReLU units and of saturated LSTM gates in a forward pass.

`layers/update_ratio` (`gazelle.runtime.layer_stats`) says whether a group's weights move;
these say whether the units they feed can still pass a gradient. Both failures were measured
on Pong (docs/results.md, "Dead units, saturated gates and an early policy collapse"): the
default IMPALA agent lost 12 of its first conv layer's 16 channels to ReLUs that never fire
within its first ~100 updates (its update ratios stayed normal: the live channels moved),
and an LSTM agent's gates sat at 0 or 1 on ~80% of their units, its torso's gradient 1e4x
below the heads'.

Metric names, per top-level group of the module (`torso`, `core`, ... as the layer stats):

- `layers/dead_units/<group>`: over the group's `nn.ReLU` modules, the largest share of
  units that were 0 for every sample of the pass (a unit: a channel of a conv feature map,
  a feature of a vector); over its `nn.ELU` modules, of units whose input was below -3
  for every sample (an ELU's slope there, exp(x), is under 5% of its slope above 0: a unit
  nearly as cut off, though never wholly). The worst layer, not the mean: 12 dead channels
  of a first layer of 16 are 4% of the shallow torso's 304 units and 75% of its input.
- `layers/saturated_gates/<group>`: over the group's `nn.LSTM` calls, the share of gate
  units (input, forget, cell, output; every step and batch element) whose pre-activation is
  beyond the point where the gate's derivative is 7% of its peak: |z| > 4 for a sigmoid
  gate, |z| > 2 for the tanh one. Only single-layer, unidirectional LSTMs are read.

Only passes run inside `recording()` are measured: the hooks are registered on entry and
removed on exit.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

#: Gate pre-activations beyond these are saturated: sigmoid'(4) and tanh'(2) are ~7% of
#: their peaks (sigmoid'(0) = 1/4, tanh'(0) = 1).
SIGMOID_SATURATED = 4.0
TANH_SATURATED = 2.0
#: An ELU's output below this has an input below -3 (`ELU(-3) = exp(-3) - 1`).
ELU_FLOOR = math.exp(-3.0) - 1.0


def dead_share(activations: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """Share of units at or below `floor` everywhere (0: a ReLU's; `ELU_FLOOR`: an ELU's):
    `[N, C, ...]` -> per channel `C` over `N` and the rest; `[N, F]` -> per feature over `N`."""
    per_unit = activations.detach().transpose(0, 1).flatten(1)  # [C, N * ...]
    return (per_unit > floor).any(dim=1).logical_not().float().mean()


def dead_floor(module: nn.Module) -> float | None:
    """The output at or below which a unit of `module` counts as dead (`dead_share`): 0 for
    a ReLU, `ELU_FLOOR` for an ELU of alpha 1; None for any other module."""
    if isinstance(module, nn.ReLU):
        return 0.0
    if isinstance(module, nn.ELU) and module.alpha == 1.0:
        return ELU_FLOOR
    return None


def saturated_gates(
    lstm: nn.LSTM, inputs: torch.Tensor, h0: torch.Tensor, outputs: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """(saturated, all) gate units of a one-layer `lstm` call on `[T, B, I]` `inputs` from
    hidden state `h0` `[1, B, H]` with outputs `[T, B, H]`."""
    w_ih, w_hh, b_ih, b_hh = (t.detach() for t in lstm.all_weights[0])
    # why: the hidden state before step t is h0 at t = 0 and the output of step t - 1 after.
    previous = torch.cat([h0.detach(), outputs.detach()[:-1]])  # [T, B, H]
    gates = inputs.detach() @ w_ih.T + b_ih + previous @ w_hh.T + b_hh  # [T, B, 4H]
    i, f, g, o = gates.chunk(4, dim=-1)  # nn.LSTM's gate order
    sigmoid = torch.cat([i, f, o], dim=-1).abs() > SIGMOID_SATURATED
    tanh = g.abs() > TANH_SATURATED
    return sigmoid.sum() + tanh.sum(), gates.numel()


class UnitHealth:
    """The ReLUs, ELUs and LSTMs of `module`'s top-level children; `recording()` around a forward
    pass collects their shares, `metrics()` returns and clears them."""

    def __init__(self, module: nn.Module) -> None:
        self._dead: dict[str, list[torch.Tensor]] = {}
        # why: tensors, not floats: no host sync per hook on a GPU learner.
        self._saturated: dict[str, list[Any]] = {}  # group -> [saturated, all]
        self._targets: list[tuple[nn.Module, Callable[..., None]]] = []
        for group, child in module.named_children():
            for sub in child.modules():
                floor = dead_floor(sub)
                if floor is not None:
                    self._targets.append((sub, self._unit_hook(group, floor)))
                elif isinstance(sub, nn.LSTM) and sub.num_layers == 1 and not sub.bidirectional:
                    self._targets.append((sub, self._lstm_hook(group)))

    def _unit_hook(self, group: str, floor: float) -> Callable[..., None]:
        def hook(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
            if output.dim() >= 2:
                self._dead.setdefault(group, []).append(dead_share(output, floor))

        return hook

    def _lstm_hook(self, group: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
            x, state = inputs[0], inputs[1] if len(inputs) > 1 else None
            if x.dim() != 3 or state is None or module.batch_first:
                return
            assert isinstance(module, nn.LSTM)
            saturated, count = saturated_gates(module, x, state[0], output[0])
            totals = self._saturated.setdefault(group, [0, 0])
            totals[0] = totals[0] + saturated
            totals[1] += count

        return hook

    @contextlib.contextmanager
    def recording(self, on: bool = True) -> Iterator[None]:
        """Measure the passes run inside (autograd on or off), if `on`.

        The hooks exist only in here: a module copied or pickled outside (the inference
        server's copy, a Ray actor's) carries none, and acting passes cost nothing."""
        handles = [m.register_forward_hook(hook) for m, hook in self._targets] if on else []
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def metrics(self) -> dict[str, torch.Tensor]:
        """`layers/dead_units/<group>` (worst layer) and `layers/saturated_gates/<group>`
        (over every gate unit of the calls) of the recorded passes; then clears them."""
        out = {f"layers/dead_units/{g}": torch.stack(v).max() for g, v in self._dead.items()}
        out.update({f"layers/saturated_gates/{g}": s / n for g, (s, n) in self._saturated.items()})
        self._dead.clear()
        self._saturated.clear()
        return out


#: A core whose median share of saturated gates is at least this is warned about
#: (`SaturationWatch`). Measured (`layers/saturated_gates/core`, progress rows): learning
#: runs 0.00-0.29 at the median (BabyAI, ViZDoom HealthGathering, CartPole; 0.75-0.88 for
#: A3C's vector LSTM, which solves CartPole at 0.75 and 0.84); stalled ones 0.98-0.99 (Pong's
#: deep torso + LSTM, no gradient reaching the torso; DefendCenter at APPO's 3e-3, 2.5 of
#: the best member's 15.8).
SATURATED_SHARE = 0.95


class SaturationWatch:
    """Warns once when the median of a group's saturated-gate share over its last
    `patience` updates is at least `threshold`: an LSTM that passes almost no gradient
    through its gates, so neither it nor the torso below it can learn again.

    Fed every update's metrics; only those with `layers/saturated_gates/<group>` (measured
    on one update in ten, or `every`) count. `warn` receives one line; it is called again
    only after the median falls below the threshold and rises anew.
    """

    def __init__(
        self,
        group: str = "core",
        threshold: float = SATURATED_SHARE,
        patience: int = 100,
        warn: Callable[[str], None] = print,
        every: int = 10,
    ) -> None:
        self.key, self.threshold, self.warn = f"layers/saturated_gates/{group}", threshold, warn
        self._window: deque[float] = deque(maxlen=max(1, math.ceil(patience / every)))
        self._span = self._window.maxlen * every if self._window.maxlen else every
        self._warned = False

    def update(self, metrics: dict[str, Any], updates: int) -> bool:
        """Feed one update's metrics; returns True when it warned now."""
        value = metrics.get(self.key)
        if value is None:
            return False
        self._window.append(float(value))
        if len(self._window) < (self._window.maxlen or 1):
            return False
        median = statistics.median(self._window)
        if median < self.threshold:
            self._warned = False
            return False
        if self._warned:
            return False
        self._warned = True
        self.warn(
            f"gazelle: warning: {median:.2f} of the LSTM's gate units have been saturated "
            f"(median over the last {self._span} updates, at update {updates}): its gates "
            "pass almost no gradient, so neither the core nor the torso below it learns. "
            "Usual cause: the core's input grew (an unbounded torso's output; see "
            "benchmarks/unit_health.py on the checkpoint); --core-input-norm keeps it at unit "
            'scale (docs/notes/lstm.md, "The deep LSTM\'s stall"), or lower --learning-rate'
        )
        return True
