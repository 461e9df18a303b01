"""The recurrent core: an LSTM whose state resets wherever an episode starts.

`done[t, b]` means observation `t` of batch element `b` starts a new episode, so the state
of `b` is set back to the initial (zero) state *before* step `t` is processed, as the IMPALA
seed does inside its unroll.

Fast path: between two steps at which some element is done, no state is reset, so the whole
stretch goes through `nn.LSTM` in one call (one fused kernel over time) instead of one call
per step. An unroll is cut into such stretches; with no done at all it is a single call.
A stretch of one step (every actor's step: T = 1) is the LSTM cell's equations on the same
weights instead: a call to `nn.LSTM` costs ~0.25 ms of set-up on a CPU, 3-4x one step's
arithmetic at batch 1 (a worker of `--algo a3c` spent 30% of its acting thread in it). Both
paths agree with the step-by-step `nn.LSTM` reference to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gazelle.types import AgentState


class LSTMCore(nn.Module):
    """LSTM with per-element resets. State `(h, c)`, each float32 `[B, hidden_size]`.

    The LSTM always runs in float32 (autocast is switched off inside): the state is carried
    across unrolls and stored per env, and the core is a small part of the compute.
    """

    def __init__(self, input_size: int, hidden_size: int = 256, input_norm: bool = False):
        super().__init__()
        #: With `input_norm`, each step's input goes through a layer norm first: the gates
        #: then see an input of unit scale whatever the torso's output grew to (an
        #: unbounded ReLU torso's output grew ~600x on Pong, every gate saturated and no
        #: gradient reached the torso: docs/notes/lstm.md, "The deep LSTM's stall").
        self.input_norm = nn.LayerNorm(input_size) if input_norm else None
        self.lstm = nn.LSTM(input_size, hidden_size)
        self.hidden_size = hidden_size

    def initial_state(
        self, batch_size: int, device: torch.device | str | None = None
    ) -> AgentState:
        """Zero state `(h, c)`, each `[batch_size, hidden_size]` float32."""
        if device is None:
            device = next(self.lstm.parameters()).device
        zeros = torch.zeros(batch_size, self.hidden_size, device=device)
        return zeros, zeros.clone()

    @staticmethod
    def reset(state: AgentState, done: torch.Tensor) -> AgentState:
        """The state with elements where `done` (bool `[B]`) is True set to zeros."""
        mask = done.unsqueeze(-1)
        return tuple(s.masked_fill(mask, 0.0) for s in state)

    def _run(self, inputs: torch.Tensor, state: AgentState) -> tuple[torch.Tensor, AgentState]:
        """`nn.LSTM` over `[t, B, I]` from state `(h, c)` `[B, H]` with no reset inside."""
        h, c = state
        outputs, (h, c) = self.lstm(inputs, (h.unsqueeze(0), c.unsqueeze(0)))
        return outputs, (h.squeeze(0), c.squeeze(0))

    def _step(self, inputs: torch.Tensor, state: AgentState) -> tuple[torch.Tensor, AgentState]:
        """One step `[B, I]` from `(h, c)` `[B, H]`: the equations `nn.LSTM` computes, with
        its weights and gate order (i, f, g, o). Returns `[1, B, H]` and the new state."""
        w_ih, w_hh, b_ih, b_hh = self.lstm.all_weights[0]  # layer 0: nn.LSTM's own order
        h, c = state
        gates = F.linear(inputs, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h.unsqueeze(0), (h, c)

    def forward(
        self, inputs: torch.Tensor, done: torch.Tensor, state: AgentState, fast: bool = True
    ) -> tuple[torch.Tensor, AgentState]:
        """Runs the core over an unroll.

        Args:
            inputs: `[T, B, input_size]` (any float dtype; computed in float32).
            done: bool `[T, B]`; reset the state of element `b` before step `t` if True.
            state: `(h, c)` `[B, hidden_size]` before step 0.
            fast: run the stretches between dones as single `nn.LSTM` calls, and those of
                one step as the cell's equations (else one `nn.LSTM` call per step, the
                reference).

        Returns:
            outputs float32 `[T, B, hidden_size]` and the state after step `T - 1`.
        """
        with torch.autocast(inputs.device.type, enabled=False):
            inputs = inputs.float()
            if self.input_norm is not None:
                inputs = self.input_norm(inputs)
            num_steps = inputs.shape[0]
            if fast and num_steps > 1:
                # why: a stretch starts at 0 and at every step where some element is done;
                # within a stretch only its first step can reset, so it runs in one call.
                # The +1 maps indices of done[1:] back to steps.
                any_done = done[1:].any(dim=1).nonzero().flatten() + 1
                starts = [0, *any_done.tolist()]
            else:
                starts = list(range(num_steps))
            ends = [*starts[1:], num_steps]
            outputs = []
            for start, end in zip(starts, ends):
                state = self.reset(state, done[start])
                if fast and end - start == 1:
                    out, state = self._step(inputs[start], state)
                else:
                    out, state = self._run(inputs[start:end], state)
                outputs.append(out)
            return torch.cat(outputs), state
