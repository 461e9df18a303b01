"""What the LSTM core does during a real IMPALA run: gates, cell state, inputs, gradients.

    python benchmarks/lstm_probe.py train OUT [NAME=VALUE ...]     # a run, probed
    python benchmarks/lstm_probe.py report OUT [OUT ...]           # the tables of runs
    python benchmarks/lstm_probe.py replay [ENV] [--max-steps N]   # actor state == learner's?

`train` runs `gazelle train` (IMPALA, local actors) with every setting NAME=VALUE (a flat
config name, the value read as JSON where it parses: `env="CartPole-v1" use_lstm=true
seed=3`) and wraps IMPALA's loss: one update in `--every` (default 5) writes a row to
OUT/lstm_probe.jsonl with

- `frames`, `update`, the loss's own metrics;
- the **core input's scale**: RMS of its torso part and of the whole input (the clipped
  reward and the one-hot action are the rest);
- the **stored state** the unrolls start from (the actors' `(h, c)`): mean and max |c|;
- the **gates over the unroll**, recomputed from that state with the learner's weights:
  mean input/forget/output gate, the share of gate units saturated (|z| > 4 for a sigmoid
  gate, > 2 for tanh, as `gazelle.runtime.unit_health`), mean and max |c|;
- the **policy lag along the unroll**: KL(actor || learner) at the unroll's first and last
  steps (a recurrent core whose state drifts under new weights shows it growing with t);
- the **gradient through time**: |dL/dx_t| at the core's input for the first and last steps,
  |dL/dh_0| and |dL/dc_0| at the stored state, and per layer the gradient norm before the
  clip;
- the **update size per layer**: ||w_new - w_old|| / ||w_old|| of each core tensor
  (`weight_ih`, `weight_hh`, `bias`), the torso, the heads.

Every `--episode-every` updates (default 50) it also plays one episode of the run's env with
the learner's weights (sampled actions, up to `--episode-steps`, default 500) and writes the
same core statistics binned over the **time in the episode** (`"kind": "episode"` rows): the
lead of docs/results.md was states late in CartPole's 500-step episodes.

`replay` checks the path the state takes, with no training: a real `Actor` (its env batch,
`LocalPolicy`) writes unrolls of a fixed agent into memory; the learner's `agent.unroll` from
each stored state must give the stored logits, the next unroll's stored state and, where
a time limit cut an episode (`--max-steps`, CartPole-v1's 500 by default), the stored
truncation bootstrap. It prints the largest differences.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

SIGMOID_SATURATED, TANH_SATURATED = 4.0, 2.0
#: Time-in-episode bins of the episode rows (steps).
BIN = 25


#: Experimental cores for A/B runs (`--core`): the env var reaches the actor processes too,
#: which import this file as their `__mp_main__` (spawn) and so apply the same patch.
CORE_ENV = "LSTM_PROBE_CORE"
CORE_VARIANTS = ("seed", "ln", "ln0", "inln", "clip5", "step", "noreset", "skip", "warm")


def input_proj(core: Any, inputs: torch.Tensor) -> torch.Tensor:
    """The input's share of the gate pre-activations `[..., 4H]` (bias included)."""
    variant = getattr(core, "probe_variant", "seed")
    w_ih, _, b_ih, _ = core.lstm.all_weights[0]
    if variant == "inln":
        inputs = core.ln_in(inputs)
    xw = inputs @ w_ih.T
    if variant in ("ln", "ln0"):
        xw = core.ln_x(xw)
    return xw + b_ih


def cell(core: Any, xw: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[Any, ...]:
    """One step of `core`'s variant from the input projection `xw` `[B, 4H]`: the gate
    pre-activations `[B, 4H]`, and the new `(h, c)`."""
    variant = getattr(core, "probe_variant", "seed")
    _, w_hh, _, b_hh = core.lstm.all_weights[0]
    hw = h @ w_hh.T
    if variant in ("ln", "ln0"):
        hw = core.ln_h(hw)
    z = xw + hw + b_hh
    i, f, g, o = z.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    if variant == "clip5":
        c = c.clamp(-5.0, 5.0)
    cn = core.ln_c(c) if variant in ("ln", "ln0") else c
    return z, torch.sigmoid(o) * torch.tanh(cn), c


def _patch_core(variant: str) -> None:
    """Replace `LSTMCore`'s step with `variant`'s (`seed`: leave it as it is).

    - `ln`: layer-normalised LSTM (Ba et al. 2016): LN (with gain and bias) over the 4H gate
      pre-activations of the input and of the recurrent projection, and over c before tanh;
    - `ln0`: the same LNs without gain or bias (the seed's parameters, nothing added);
    - `inln`: LayerNorm (with gain and bias) on the core input only;
    - `clip5`: c clipped to [-5, 5] after each step;
    - `step`: the seed's LSTM computed as `clip5` is (the cell's equations, one step at a
      time, in the actors and the learner) with no clip: what `clip5` changes besides it;
    - `noreset`: the seed's LSTM, its state never reset at an episode's start (carried on
      from the previous episode), in the actors and the learner alike;
    - `skip`: the seed's LSTM, its output `h + P x` (P a linear map of the core input): the
      heads see the present input directly at every step, the first after a reset too;
    - `warm`: the seed's LSTM, reset not to zeros but to the state `WARM_STEPS` steps of the
      cell on the episode's first input reach from zeros.
    """
    if variant == "seed":
        return
    if variant not in CORE_VARIANTS:
        raise SystemExit(f"--core: {variant!r}; allowed: {', '.join(CORE_VARIANTS)}")
    from torch import nn

    from gazelle.models import core as core_mod

    cls = core_mod.LSTMCore
    if getattr(cls, "probe_variant", "seed") != "seed":
        return
    if variant == "noreset":
        cls.probe_variant = variant  # type: ignore[attr-defined]
        cls.reset = staticmethod(lambda state, done: state)  # type: ignore[method-assign]
        return
    if variant == "warm":
        cls.probe_variant = variant  # type: ignore[attr-defined]
        cls.forward = _warm_forward  # type: ignore[method-assign]
        return
    original_init = cls.__init__

    def init(self: Any, input_size: int, hidden_size: int = 256) -> None:
        original_init(self, input_size, hidden_size)
        affine = variant == "ln"
        if variant in ("ln", "ln0"):
            self.ln_x = nn.LayerNorm(4 * hidden_size, elementwise_affine=affine)
            self.ln_h = nn.LayerNorm(4 * hidden_size, elementwise_affine=affine)
            self.ln_c = nn.LayerNorm(hidden_size, elementwise_affine=affine)
        if variant == "inln":
            self.ln_in = nn.LayerNorm(input_size)
        if variant == "skip":
            self.skip = nn.Linear(input_size, hidden_size)

    def run(self: Any, inputs: torch.Tensor, state: Any) -> Any:
        h, c = state
        xw = input_proj(self, inputs)
        outs = []
        for t in range(inputs.shape[0]):
            _, h, c = cell(self, xw[t], h, c)
            outs.append(h)
        out = torch.stack(outs)
        if variant == "skip":
            out = out + self.skip(inputs)
        return out, (h, c)

    cls.probe_variant = variant  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[method-assign]
    cls._run = run  # type: ignore[method-assign]
    # why: a one-step call gets [B, I]; `run` takes [t, B, I].
    cls._step = lambda self, x, st: run(self, x.unsqueeze(0), st)  # type: ignore[method-assign]


WARM_STEPS = 8


def _warm_forward(
    self: Any, inputs: torch.Tensor, done: torch.Tensor, state: Any, fast: bool = True
) -> Any:
    """`LSTMCore.forward` with the `warm` reset (`_patch_core`): one step at a time."""
    with torch.autocast(inputs.device.type, enabled=False):
        inputs = inputs.float()
        h, c = state
        outs = []
        for t in range(inputs.shape[0]):
            if bool(done[t].any()):
                xw = input_proj(self, inputs[t])
                wh, wc = torch.zeros_like(h), torch.zeros_like(c)
                for _ in range(WARM_STEPS):
                    _, wh, wc = cell(self, xw, wh, wc)
                mask = done[t].unsqueeze(-1)
                h, c = torch.where(mask, wh, h), torch.where(mask, wc, c)
            _, h, c = cell(self, input_proj(self, inputs[t]), h, c)
            outs.append(h)
        return torch.stack(outs), (h, c)


_patch_core(os.environ.get(CORE_ENV, "seed"))


def gate_trace(
    core: Any, inputs: torch.Tensor, done: torch.Tensor, state: tuple[Any, ...]
) -> dict[str, torch.Tensor]:
    """Step-by-step recomputation of `core` (an `LSTMCore`, any probe variant) over
    `[T, B, I]` from `(h, c)` `[B, H]`, resetting where `done` `[T, B]`. Per step `[T]`: mean
    i/f/o gate, saturated share of all gate units, mean and max |c|."""
    h, c = (s.detach().float() for s in state)
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("i", "f", "o", "sat", "c", "cmax")}
    with torch.no_grad():
        xw = input_proj(core, inputs.detach().float())
        for t in range(inputs.shape[0]):
            keep = (~done[t]).float().unsqueeze(-1)
            z, h, c = cell(core, xw[t], h * keep, c * keep)
            zi, zf, zg, zo = z.chunk(4, dim=-1)
            sat = torch.cat([zi, zf, zo], -1).abs().gt(SIGMOID_SATURATED).float().sum(-1)
            sat = (sat + zg.abs().gt(TANH_SATURATED).float().sum(-1)) / z.shape[-1]
            for key, value in (("i", zi), ("f", zf), ("o", zo)):
                rows[key].append(torch.sigmoid(value).mean())
            rows["sat"].append(sat.mean())
            rows["c"].append(c.abs().mean())
            rows["cmax"].append(c.abs().max())
    return {k: torch.stack(v) for k, v in rows.items()}


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dim."""
    logp, logq = F.log_softmax(p_logits, -1), F.log_softmax(q_logits, -1)
    return (logp.exp() * (logp - logq)).sum(-1)


def _r(x: Any, digits: int = 4) -> float:
    value = float(x)
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


class ProbedLoss:
    """IMPALA's loss, with one update in `every` measured (module docstring)."""

    def __init__(
        self,
        base: Any,
        out: Path,
        env: str,
        every: int,
        episode_every: int,
        episode_steps: int,
        lr_scales: dict[str, float] | None = None,
    ):
        self.base, self.every = base, every
        #: group (the agent's top-level child: core, policy, baseline, torso) -> lr scale.
        self.lr_scales = {k: v for k, v in (lr_scales or {}).items() if v != 1.0}
        self.out = out
        self._scaled_before: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self.episode_every, self.episode_steps, self.env_id = episode_every, episode_steps, env
        self.log = (out / "lstm_probe.jsonl").open("w")
        self.calls = 0
        self.frames = 0
        self._pending: dict[str, Any] | None = None
        self._before: dict[str, torch.Tensor] = {}
        self._env: Any = None

    # The learner calls this after each applied optimiser step (`make_learner`).
    def after_step(self, agent: torch.nn.Module) -> None:
        base_after = getattr(self.base, "after_step", None)
        if base_after is not None:
            base_after(agent)
        if self._scaled_before:
            # why: Adam's and RMSProp's steps are proportional to the lr, so scaling a
            # group's step after the fact is a per-group learning rate.
            with torch.no_grad():
                for p, old, scale in self._scaled_before:
                    p.copy_(old + scale * (p - old))
            self._scaled_before = []
        if self._pending is None:
            return
        row = self._pending
        for name, p in agent.named_parameters():
            old = self._before.get(name)
            # why: a zero-initialised tensor (most biases) has no scale to compare against.
            if old is not None and float(old.norm()) > 1e-6:
                ratio = (p.detach() - old).norm() / old.norm().clamp_min(1e-12)
                row[f"update/{_short(name)}"] = _r(ratio)
        row.update(self._step_kl(agent))
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()
        self._pending, self._before = None, {}
        if self.episode_every and self.calls % self.episode_every == 1 and agent.core is not None:
            self._episode(agent)

    def _step_kl(self, agent: Any) -> dict[str, float]:
        """How far this update moved the learner's policy on its own batch: KL(before ||
        after) with every tensor updated (`step_kl/all`) and with only one group's update
        applied, the rest at their old values (`step_kl/head`: the policy head; `core`: the
        LSTM; `torso`: the encoders)."""
        old_logits, batch = getattr(self, "_old_logits", None), getattr(self, "_batch", None)
        if old_logits is None or batch is None or not self._before:
            return {}
        params = dict(agent.named_parameters())
        new = {n: p.detach().clone() for n, p in params.items()}
        groups = {
            "all": lambda n: True,
            "head": lambda n: n.startswith("policy."),
            "core": lambda n: n.startswith("core."),
            "torso": lambda n: not n.startswith(("policy.", "core.", "baseline.")),
        }
        seen: dict[str, torch.Tensor] = {}
        handle = agent.policy.register_forward_hook(
            lambda _m, _a, out: seen.__setitem__("logits", out.detach())
        )
        out: dict[str, float] = {}
        try:
            with torch.no_grad():
                for group, chosen in groups.items():
                    for n, p in params.items():
                        if n in self._before:
                            p.copy_(new[n] if chosen(n) else self._before[n])
                    self.base(agent, dict(batch))
                    kl = _kl(old_logits.float(), seen["logits"].float()).mean()
                    out[f"step_kl/{group}"] = _r(kl)
        finally:
            handle.remove()
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(new[n])
        self._old_logits = self._batch = None
        return out

    def __call__(self, agent: Any, batch: dict[str, torch.Tensor]) -> Any:
        self.calls += 1
        steps, size = batch["done" if "done" in batch else "reward"].shape
        self.frames += (steps - 1) * size
        core = getattr(agent, "core", None)
        for group, scale in self.lr_scales.items():
            for p in getattr(agent, group).parameters():
                self._scaled_before.append((p, p.detach().clone(), scale))
        if (self.calls - 1) % self.every:
            return self.base(agent, batch)
        if core is None:
            return self._feed_forward(agent, batch, steps, size)
        seen: dict[str, Any] = {}

        def pre(_m: Any, args: tuple[Any, ...]) -> None:
            seen["x"], seen["done"], seen["state"] = args[0], args[1], args[2]

        def post(_m: Any, _args: Any, output: Any) -> None:
            seen["out"] = output[0]

        def logits_hook(_m: Any, args: Any, output: torch.Tensor) -> None:
            seen["logits"], seen["head_in"] = output, args[0]

        batch = dict(batch)
        self._batch = {k: v.detach() for k, v in batch.items()}
        h0 = batch["state_h"].detach().clone().requires_grad_(True)
        c0 = batch["state_c"].detach().clone().requires_grad_(True)
        batch["state_h"], batch["state_c"] = h0, c0
        handles = [
            core.register_forward_pre_hook(pre),
            core.register_forward_hook(post),
            agent.policy.register_forward_hook(logits_hook),
        ]
        try:
            loss, metrics = self.base(agent, batch)
        finally:
            for handle in handles:
                handle.remove()
        self._before = {n: p.detach().clone() for n, p in agent.named_parameters()}
        row: dict[str, Any] = {"kind": "update", "update": self.calls, "frames": self.frames}
        row.update({k: _r(v) for k, v in metrics.items() if torch.as_tensor(v).numel() == 1})
        x = seen["x"]  # [T+1, B, I]
        torso = agent.torso.output_size if agent.torso is not None else x.shape[-1]
        row["input/torso_rms"] = _r(x[..., :torso].detach().pow(2).mean().sqrt())
        row["input/all_rms"] = _r(x.detach().pow(2).mean().sqrt())
        row["input/torso_absmax"] = _r(x[..., :torso].detach().abs().max())
        row["stored/c_mean"] = _r(c0.detach().abs().mean())
        row["stored/c_max"] = _r(c0.detach().abs().max())
        row["stored/h_mean"] = _r(h0.detach().abs().mean())
        trace = gate_trace(core, x, seen["done"], (h0, c0))
        for key in ("i", "f", "o", "sat", "c", "cmax"):
            row[f"unroll/{key}"] = _r(trace[key].mean() if key != "cmax" else trace[key].max())
        row["unroll/c_first"], row["unroll/c_last"] = _r(trace["c"][0]), _r(trace["c"][-1])
        logits = seen["logits"].detach().view(steps, size, -1)
        self._old_logits = seen["logits"].detach()
        _head_input_row(row, seen["head_in"])
        # why: the actor's logits at t+1 are its policy on x_t (the loss's shift by one).
        kl = _kl(batch["policy_logits"][1:].float(), logits[:-1].float()).mean(1)  # [T]
        row["kl/first"], row["kl/last"], row["kl/mean"] = _r(kl[0]), _r(kl[-1]), _r(kl.mean())
        # The KL of the unrolls that start from a large stored cell state (later in an
        # episode) against those from a small one: split at the batch's median.
        per_unroll = _kl(batch["policy_logits"][1:].float(), logits[:-1].float()).mean(0)
        c_size = c0.detach().abs().mean(-1)
        high = c_size > c_size.median()
        if bool(high.any()) and bool((~high).any()):
            row["kl/high_c"], row["kl/low_c"] = (
                _r(per_unroll[high].mean()),
                _r(per_unroll[~high].mean()),
            )
        params = [p for p in agent.parameters() if p.requires_grad]
        names = [n for n, p in agent.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad(
            loss, [x, h0, c0, *params], retain_graph=True, allow_unused=True
        )
        gx = grads[0]
        if gx is not None:
            per_t = gx.detach().flatten(2).norm(dim=-1).mean(1)  # [T+1]
            row["grad/x_first"], row["grad/x_last"] = _r(per_t[0]), _r(per_t[-2])
        for key, g in (("grad/h0", grads[1]), ("grad/c0", grads[2])):
            row[key] = _r(0.0 if g is None else g.norm(dim=-1).mean())
        for name, g in zip(names, grads[3:]):
            if g is not None:
                row[f"grad/{_short(name)}"] = _r(g.norm())
        self._pending = row
        return loss, metrics

    def _feed_forward(
        self, agent: Any, batch: dict[str, torch.Tensor], steps: int, size: int
    ) -> Any:
        """A measured update of an agent without a core: the policy lag's KL and the update
        sizes only (the same columns as with a core, for comparison)."""
        seen: dict[str, Any] = {}

        def logits_hook(_m: Any, args: Any, output: torch.Tensor) -> None:
            seen["logits"], seen["head_in"] = output, args[0]

        self._batch = {k: v.detach() for k, v in batch.items()}
        handle = agent.policy.register_forward_hook(logits_hook)
        try:
            loss, metrics = self.base(agent, batch)
        finally:
            handle.remove()
        self._before = {n: p.detach().clone() for n, p in agent.named_parameters()}
        row: dict[str, Any] = {"kind": "update", "update": self.calls, "frames": self.frames}
        row.update({k: _r(v) for k, v in metrics.items() if torch.as_tensor(v).numel() == 1})
        logits = seen["logits"].detach().view(steps, size, -1)
        self._old_logits = seen["logits"].detach()
        _head_input_row(row, seen["head_in"])
        kl = _kl(batch["policy_logits"][1:].float(), logits[:-1].float()).mean(1)  # [T]
        row["kl/first"], row["kl/last"], row["kl/mean"] = _r(kl[0]), _r(kl[-1]), _r(kl.mean())
        self._pending = row
        return loss, metrics

    def _episode(self, agent: Any) -> None:
        """One episode with the learner's weights; core statistics per `BIN` steps. Also
        keeps the weights (OUT/snapshots/<update>.pt) for a look afterwards."""
        snaps = self.out / "snapshots"
        snaps.mkdir(exist_ok=True)
        torch.save(agent.state_dict(), snaps / f"{self.calls}.pt")
        from gazelle.envs import make
        from gazelle.runtime.actor import ObsEncoder

        if self._env is None:
            self._env = make(self.env_id, seed=12345)
            self._encode = ObsEncoder(agent.obs_spec)
        was_training = agent.training
        agent.eval()
        env, encode = self._env, self._encode
        obs, _ = env.reset()
        state = agent.initial_state(1)
        action = torch.zeros(1, dtype=torch.int64)
        reward = torch.zeros(1)
        done = torch.ones(1, dtype=torch.bool)
        per_step: dict[str, list[float]] = {k: [] for k in ("c", "cmax", "f", "sat", "ent")}
        steps, total = 0, 0.0
        seen: dict[str, Any] = {}

        def pre(_m: Any, args: tuple[Any, ...]) -> None:
            seen["x"], seen["state"] = args[0], args[2]

        handle = agent.core.register_forward_pre_hook(pre)
        try:
            with torch.no_grad():
                while steps < self.episode_steps:
                    batched = {k: v.unsqueeze(0) for k, v in encode(_batch1(obs)).items()}
                    batched = {k: v.squeeze(0) for k, v in batched.items()}
                    out, new_state = agent.step(batched, action, reward, done, state)
                    trace = gate_trace(agent.core, seen["x"], done.unsqueeze(0), seen["state"])
                    state = new_state
                    logp = F.log_softmax(out.policy_logits.float(), -1)
                    per_step["ent"].append(float(-(logp.exp() * logp).sum()))
                    for key in ("c", "cmax", "f", "sat"):
                        per_step[key].append(float(trace[key][0]))
                    action = out.action
                    obs, r, terminated, truncated, _ = env.step(int(action[0]))
                    reward = torch.tensor([float(r)])
                    done = torch.zeros(1, dtype=torch.bool)
                    total += float(r)
                    steps += 1
                    if terminated or truncated:
                        break
        finally:
            handle.remove()
            agent.train(was_training)
        row: dict[str, Any] = {
            "kind": "episode", "update": self.calls, "frames": self.frames,
            "length": steps, "return": total,
        }  # fmt: skip
        for key, values in per_step.items():
            arr = np.asarray(values)
            bins = [arr[i : i + BIN] for i in range(0, len(arr), BIN)]
            row[key] = [_r(b.max() if key == "cmax" else b.mean(), 3) for b in bins]
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()


def _head_input_row(row: dict[str, Any], head_in: torch.Tensor) -> None:
    """The policy head's input per row: its mean L1 and L2 norms and the share of entries
    with |x| > 0.9 (an Adam- or RMSProp-like step moves each head weight by about the same
    amount, so the logits move with the input's L1 norm)."""
    x = head_in.detach().float().flatten(0, -2)
    row["head_in/l1"] = _r(x.abs().sum(-1).mean())
    row["head_in/l2"] = _r(x.norm(dim=-1).mean())
    row["head_in/big"] = _r((x.abs() > 0.9).float().mean())


def _batch1(obs: dict[str, Any]) -> dict[str, Any]:
    """One env's obs as a batch of one (`ObsEncoder` takes batched obs)."""
    return {k: [v] if isinstance(v, str) else np.asarray(v)[None] for k, v in obs.items()}


def _short(name: str) -> str:
    """`core.lstm.weight_hh_l0` -> `core.weight_hh`; `torso.layers.0.weight` -> `torso.0.w`."""
    name = name.replace("lstm.", "").replace("_l0", "").replace("layers.", "")
    return name.replace(".weight", ".w").replace(".bias", ".b")


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        try:
            settings[name] = json.loads(text)
        except json.JSONDecodeError:
            settings[name] = text
    return settings


def cmd_train(args: argparse.Namespace) -> None:
    from gazelle.algorithms.impala import train
    from gazelle.algorithms.impala.build import vtrace_loss
    from gazelle.config import Config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # why: set before the actors start, so that their `__mp_main__` patches the same core.
    os.environ[CORE_ENV] = args.core
    _patch_core(args.core)
    settings = {"logdir": str(out), "log_interval_s": 5.0, **parse_settings(args.settings)}
    config = Config.of(**settings)
    env = str(config.get("env"))

    def make_loss(cfg: Any) -> Any:
        return ProbedLoss(
            vtrace_loss(cfg), out, env, args.every, args.episode_every,
            args.episode_steps, parse_settings(args.lr_scale),
        )  # fmt: skip

    start = time.monotonic()
    result = train(config, make_loss=make_loss)
    print(json.dumps({"return": result.recent_return, "frames": result.frames,
                      "seconds": round(time.monotonic() - start, 1)}))  # fmt: skip


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def returns_at(run: Path) -> list[tuple[int, float | None]]:
    return [(r["frames"], r.get("episode_return")) for r in _rows(run / "progress.jsonl")]


def episode_returns(run: Path) -> list[tuple[int, float]]:
    """(frames, return) of every episode of a run (TensorBoard's `charts/episode_return`)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars("charts/episode_return")]


def collapse_summary(run: Path, after: int = 100_000, below: float = 25.0) -> dict[str, Any]:
    """The saw's measures of docs/results.md: the share of episodes after `after` frames
    shorter than `below` (random play: ~22 steps on CartPole), the longest run of them, the
    largest fall of the 100-episode mean from its running peak, the first frame at which
    that mean reached 450, and the last mean."""
    episodes = episode_returns(run)
    later = [v for f, v in episodes if f > after]
    longest = run_length = 0
    for value in later:
        run_length = run_length + 1 if value < below else 0
        longest = max(longest, run_length)
    peak, fall, first_450 = -math.inf, 0.0, None
    window: list[float] = []
    for frames, value in episodes:
        window = [*window[-99:], value]
        mean = sum(window) / len(window)
        if len(window) == 100:
            peak = max(peak, mean)
            fall = max(fall, peak - mean)
            if first_450 is None and mean >= 450:
                first_450 = frames
    return {
        "episodes": len(episodes),
        "below_share": round(sum(v < below for v in later) / max(len(later), 1), 3),
        "longest_below": longest,
        "largest_fall": round(fall, 1),
        "first_450": first_450,
        "final_mean": round(sum(window) / max(len(window), 1), 1),
    }


def cmd_report(args: argparse.Namespace) -> None:
    """Per run: the saw's summary, then a row per ~`--step` frames of the probe's key
    columns, and the episode rows."""
    cols = (
        "stored/c_mean", "stored/c_max", "unroll/f", "unroll/sat", "input/torso_rms",
        "kl/first", "kl/last", "kl/low_c", "kl/high_c", "grad/x_first", "grad/c0",
        "update/core.w_hh", "update/core.w_ih", "update/torso.0.w", "update/policy.w",
    )  # fmt: skip
    for name in args.runs:
        run = Path(name)
        rows = _rows(run / "lstm_probe.jsonl")
        progress = returns_at(run)
        print(f"\n## {run}\n")
        print(json.dumps(collapse_summary(run)))
        if args.summary:
            continue
        print("\n| frames | return | " + " | ".join(cols) + " |")
        print("| --- " * (len(cols) + 2) + "|")
        updates = [r for r in rows if r["kind"] == "update"]
        next_at = 0
        for r in updates:
            if r["frames"] < next_at:
                continue
            next_at = r["frames"] + args.step
            ret = [v for f, v in progress if f <= r["frames"]]
            shown = f"{ret[-1]:.0f}" if ret and ret[-1] is not None else "-"
            cells = [f"{r.get(c, float('nan')):.3g}" for c in cols]
            print(f"| {r['frames']} | {shown} | " + " | ".join(cells) + " |")
        episodes = [r for r in rows if r["kind"] == "episode"]
        if episodes:
            print("\nepisodes (per 25 steps: mean |c| / max |c| / forget / saturated / entropy)")
            for r in episodes:
                parts = []
                for i in (0, 1, 3, 7, 11, 15, 19):
                    if i < len(r["c"]):
                        parts.append(
                            f"t{i * BIN}:{r['c'][i]:.2g}/{r['cmax'][i]:.2g}/{r['f'][i]:.2f}/"
                            f"{r['sat'][i]:.2f}/{r['ent'][i]:.2f}"
                        )
                print(f"{r['frames']:>8} len {r['length']:>3}  " + "  ".join(parts))


def start_policy(agent: Any, env: Any, episodes: int = 6, first: int = 3) -> dict[str, float]:
    """How the agent acts at the start of an episode against later: sampled episodes of
    `env` played as an actor plays them (the previous episode's last action and reward with
    the reset); per episode the mean probability of action 1 over its `first` steps and
    over the rest. Returns the mean and the spread across episodes of each, and the mean
    length. A spread near 0 at the start means an open-loop start: the same action
    probabilities whatever the first observations."""
    from gazelle.runtime.actor import ObsEncoder

    encode = ObsEncoder(agent.obs_spec)
    starts, rests, lengths = [], [], []
    action, reward = torch.zeros(1, dtype=torch.int64), torch.zeros(1)
    with torch.no_grad():
        for episode in range(episodes):
            obs, _ = env.reset(seed=500 + episode)
            state = agent.initial_state(1)
            done = torch.ones(1, dtype=torch.bool)
            probs: list[float] = []
            while True:
                out, state = agent.step(encode(_batch1(obs)), action, reward, done, state)
                probs.append(float(F.softmax(out.policy_logits[0].float(), -1)[1]))
                action, done = out.action, torch.zeros(1, dtype=torch.bool)
                obs, r, terminated, truncated, _ = env.step(int(action[0]))
                reward = torch.tensor([float(r)])
                if terminated or truncated:
                    break
            lengths.append(len(probs))
            starts.append(float(np.mean(probs[:first])))
            if len(probs) > first:
                rests.append(float(np.mean(probs[first:])))
    return {
        "length": float(np.mean(lengths)),
        "start_p1": float(np.mean(starts)),
        "start_spread": float(np.std(starts)),
        "rest_p1": float(np.mean(rests)) if rests else float("nan"),
        "rest_spread": float(np.std(rests)) if rests else float("nan"),
    }


def cmd_starts(args: argparse.Namespace) -> None:
    """`start_policy` of each kept snapshot of a probed run (its config names the agent)."""
    from gazelle.config import Config
    from gazelle.envs import make, obs_spec
    from gazelle.models import build_agent

    run = Path(args.run)
    config = Config.from_dict(json.loads((run / "config.json").read_text()))
    _patch_core(args.core)
    env = make(str(config.get("env")), seed=7)
    agent = build_agent(obs_spec(env), str(config.get("model")), True)
    snaps = sorted((run / "snapshots").glob("*.pt"), key=lambda p: int(p.stem))
    print("| update | frames | length | P(a=1), first 3 steps | spread | later | spread |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in snaps[:: args.stride]:
        agent.load_state_dict(torch.load(path, weights_only=True))
        agent.eval()
        m = start_policy(agent, env)
        frames = int(path.stem) * int(config.get("batch_size")) * int(config.get("unroll_length"))
        print(
            f"| {path.stem} | {frames} | {m['length']:.0f} | {m['start_p1']:.2f} | "
            f"{m['start_spread']:.2f} | {m['rest_p1']:.2f} | {m['rest_spread']:.2f} |"
        )


class MemoryWriter:
    """An `UnrollWriter` into plain tensors (for `replay`): every slot kept."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
        self.states: dict[int, tuple[torch.Tensor, ...]] = {}
        self.next = 0
        #: env index -> the final frame of an episode cut at the step being written.
        self.finals: dict[int, Any] = {}

    def acquire(self, actor_id: int, count: int, timeout: float, should_stop: Any) -> list[int]:
        slots = list(range(self.next, self.next + count))
        self.next += count
        return slots

    def write_step(self, slots: torch.Tensor, t: int, values: dict[str, torch.Tensor]) -> None:
        for j, slot in enumerate(slots.tolist()):
            step = self.steps.setdefault(slot, {}).setdefault(t, {})
            step.update({k: v[j].clone() for k, v in values.items()})
            if "truncation_value" in values and j in self.finals:
                step["final_frame"] = torch.as_tensor(self.finals.pop(j))

    def write_state(self, slots: torch.Tensor, state: tuple[torch.Tensor, ...]) -> None:
        for j, slot in enumerate(slots.tolist()):
            self.states[slot] = tuple(s[j].clone() for s in state)

    def commit(self, slots: list[int], actor_id: int, level_id: int, version: int) -> None:
        pass

    def unroll(self, slot: int) -> dict[str, torch.Tensor]:
        """Slot `slot` as a `[T+1, 1, ...]` batch (state `[1, H]`)."""
        steps = self.steps[slot]
        out = {
            k: torch.stack([steps[t][k] for t in sorted(steps)]).unsqueeze(1)
            for k in steps[0]
            if k != "final_frame"
        }
        if self.states.get(slot):
            out["state_h"], out["state_c"] = (s.unsqueeze(0) for s in self.states[slot])
        return out


class FixedParams:
    """A `ParamSource` that never has new weights."""

    def current_version(self) -> int:
        return 0

    def pull(self, module: torch.nn.Module, have_version: int) -> int:
        return 0


def replay_check(
    env: str = "CartPole-v1",
    max_steps: int | None = None,
    unrolls: int = 40,
    unroll_length: int = 20,
    envs: int = 2,
    seed: int = 0,
) -> dict[str, float]:
    """The largest differences between what a real actor stored and what the learner's
    `agent.unroll` recomputes from the stored state (module docstring, `replay`)."""
    from gazelle.envs import make, obs_spec
    from gazelle.runtime.actor import Actor, ActorSpec, actor_agent
    from gazelle.runtime.policy import LocalPolicy

    torch.manual_seed(seed)
    kwargs = {} if max_steps is None else {"max_episode_steps": max_steps}
    probe_env = make(env, **kwargs)
    spec_ = obs_spec(probe_env)
    probe_env.close()
    spec = ActorSpec(
        actor_id=0, level=env, level_id=0, envs_per_actor=envs, unroll_length=unroll_length,
        obs_spec=spec_, torso="mlp", use_lstm=True, seed=seed, env_kwargs=kwargs,
    )  # fmt: skip
    agent = actor_agent(spec)
    writer = MemoryWriter()
    actor = Actor(spec, writer, LocalPolicy(agent, FixedParams(), envs))
    (group,) = actor.groups
    truncation_values = group.truncation_values

    def recording(step: Any, out: Any, reward: torch.Tensor) -> Any:
        """Hands the final frame of each cut episode to the writer (it is not stored)."""
        for j, final in step.final_obs.items():
            if step.truncated[j] and not step.terminated[j]:
                writer.finals[j] = np.asarray(final["frame"], np.float32)
        return truncation_values(step, out, reward)

    group.truncation_values = recording  # type: ignore[method-assign]
    truncations = 0
    for _ in range(unrolls):
        actor.unroll(writer.acquire(0, envs, 0.0, lambda: False))
    worst = {"logits": 0.0, "baseline": 0.0, "state_h": 0.0, "state_c": 0.0, "truncation": 0.0}
    with torch.no_grad():
        for slot in range(writer.next):
            batch = writer.unroll(slot)
            done = batch["terminated"] | batch["truncated"]
            state = (batch["state_h"], batch["state_c"])
            obs = {name: batch[name] for name in agent.obs_spec.names}
            out, _ = agent.unroll(obs, batch["action"], batch["reward"], done, state)
            # why: the actor's outputs at t+1 are its policy on x_t (the loss's shift).
            worst["logits"] = max(
                worst["logits"],
                float((out.policy_logits[:-1] - batch["policy_logits"][1:]).abs().max()),
            )
            worst["baseline"] = max(
                worst["baseline"], float((out.baseline[:-1] - batch["baseline"][1:]).abs().max())
            )
            following = slot + envs  # the same env's next unroll
            if following < writer.next:
                # why: the stored state is the one before x_0 of the next unroll, which is
                # this unroll's x_T: so the state after x_{T-1}, i.e. after T of T+1 steps.
                _, before_last = agent.unroll(
                    {k: v[:-1] for k, v in obs.items()}, batch["action"][:-1],
                    batch["reward"][:-1], done[:-1], state,
                )  # fmt: skip
                nxt = writer.unroll(following)
                for key, value in zip(("state_h", "state_c"), before_last):
                    worst[key] = max(worst[key], float((value - nxt[key]).abs().max()))
            cut = (batch["truncated"][1:] & ~batch["terminated"][1:]).squeeze(1)
            for t in cut.nonzero().flatten().tolist():
                truncations += 1
                # why: V(final obs) from the state after x_t, not reset: recomputed here from
                # the state after steps 0..t with the final obs as one more step.
                final = writer.steps[slot][t + 1].get("final_frame")
                if final is None:
                    continue
                _, st = agent.unroll(
                    {k: v[: t + 1] for k, v in obs.items()}, batch["action"][: t + 1],
                    batch["reward"][: t + 1], done[: t + 1], state,
                )  # fmt: skip
                value, _ = agent.step(
                    {"frame": final.unsqueeze(0)}, batch["action"][t + 1, :1],
                    batch["reward"][t + 1, :1], torch.zeros(1, dtype=torch.bool), st,
                )  # fmt: skip
                stored = batch["truncation_value"][t + 1, 0]
                worst["truncation"] = max(
                    worst["truncation"], float((value.baseline[0] - stored).abs())
                )
    worst["truncations"] = float(truncations)
    actor.close()
    return worst


def cmd_replay(args: argparse.Namespace) -> None:
    print(json.dumps(replay_check(args.env, args.max_steps, args.unrolls), indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("out")
    t.add_argument("settings", nargs="*")
    t.add_argument("--every", type=int, default=5)
    t.add_argument("--episode-every", type=int, default=50)
    t.add_argument("--episode-steps", type=int, default=500)
    t.add_argument(
        "--lr-scale",
        nargs="*",
        default=[],
        metavar="GROUP=SCALE",
        help="scale the steps of an agent group (core, policy, baseline, torso)",
    )
    t.add_argument("--core", default=os.environ.get(CORE_ENV, "seed"), choices=CORE_VARIANTS)
    t.set_defaults(func=cmd_train)
    r = sub.add_parser("report")
    r.add_argument("runs", nargs="+")
    r.add_argument("--step", type=int, default=25_000)
    r.add_argument("--summary", action="store_true", help="the saw's summary only")
    r.set_defaults(func=cmd_report)
    st = sub.add_parser("starts")
    st.add_argument("run")
    st.add_argument("--stride", type=int, default=1)
    st.add_argument("--core", default="seed", choices=CORE_VARIANTS)
    st.set_defaults(func=cmd_starts)
    p = sub.add_parser("replay")
    p.add_argument("env", nargs="?", default="CartPole-v1")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--unrolls", type=int, default=40)
    p.set_defaults(func=cmd_replay)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
