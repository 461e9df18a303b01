"""The policy's action distribution over an `ActionSpec`: log-probabilities, entropies, KLs,
samples, modes and the last-action encoding, from flat parameter tensors.

Shapes: `params` `[..., P]` (`spec.num_params`: each component's in order; a categorical's or
bernoulli's logits, a Gaussian's means then log-stds), `actions` `[..., *spec.shape]`
(a scalar spec: int64 `[...]`; else `[..., spec.slots]`, int64 or float32 by `spec.dtype`).
`log_prob`, `entropy` and `kl` return `[...]`: the components are independent, so each is
the sum over components (and over a bernoulli's bits and a Gaussian's dimensions).

Formulas (per component, `p = softmax(l)` or `sigmoid(l)`, `sigma = exp(s)`):

- categorical: log-prob `log_softmax(l)[a]`; entropy `-sum p log p`; KL(p1 || p2)
  `sum p1 (log p1 - log p2)`;
- bernoulli, per bit: log-prob `a log p + (1 - a) log(1 - p)`; entropy
  `-(p log p + (1 - p) log(1 - p))`; KL the categorical's over {0, 1};
- gaussian, per dimension: log-prob `-(a - m)^2 / (2 sigma^2) - s - log(2 pi) / 2`; entropy
  `s + (1 + log(2 pi)) / 2`; KL `s2 - s1 + (sigma1^2 + (m1 - m2)^2) / (2 sigma2^2) - 1/2`.

A scalar spec (one categorical, every Atari game) takes the same path as gazelle always
did (`log_softmax` + `gather`, `multinomial` sampling), so its runs repeat bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gazelle.actions import BERNOULLI, CATEGORICAL, GAUSSIAN, ActionComponent, ActionSpec

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

Parts = list[tuple[ActionComponent, torch.Tensor]]


def _categorical_sample(logits: torch.Tensor) -> torch.Tensor:
    """One index per row of `logits` `[..., n]` -> int64 `[...]`."""
    probs = F.softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)
    return torch.multinomial(probs, num_samples=1).reshape(logits.shape[:-1])


class ActionDistribution:
    """The distribution family of an `ActionSpec` (see the module docstring); stateless."""

    def __init__(self, spec: ActionSpec) -> None:
        self.spec = spec

    # -- splitting ---------------------------------------------------------------------
    def _params(self, params: torch.Tensor) -> Parts:
        if params.shape[-1] != self.spec.num_params:
            raise ValueError(
                f"expected {self.spec.num_params} distribution parameters for "
                f"{self.spec.describe()}, got shape {tuple(params.shape)}"
            )
        sizes = [c.params for c in self.spec.components]
        return list(zip(self.spec.components, params.split(sizes, dim=-1)))

    def _actions(self, actions: torch.Tensor) -> Parts:
        if actions.shape[-1] != self.spec.slots:
            raise ValueError(
                f"expected actions [..., {self.spec.slots}] for "
                f"{self.spec.describe()}, got shape {tuple(actions.shape)}"
            )
        sizes = [c.slots for c in self.spec.components]
        return list(zip(self.spec.components, actions.split(sizes, dim=-1)))

    # -- what the losses read ----------------------------------------------------------
    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """`log pi(actions)`, `[...]`, differentiable in `params`."""
        if self.spec.is_scalar:
            log_probs = F.log_softmax(params, dim=-1)
            return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        total = params.new_zeros(params.shape[:-1])
        for (c, p), (_, a) in zip(self._params(params), self._actions(actions)):
            if c.kind == CATEGORICAL:
                total = total + F.log_softmax(p, dim=-1).gather(-1, a.long()).squeeze(-1)
            elif c.kind == BERNOULLI:
                bits = a.to(p.dtype)
                total = total + (bits * F.logsigmoid(p) + (1 - bits) * F.logsigmoid(-p)).sum(-1)
            else:
                mean, log_std = p.chunk(2, dim=-1)
                z = (a.to(p.dtype) - mean) * torch.exp(-log_std)
                total = total + (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(-1)
        return total

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        """The policy's entropy per step, `[...]` (nats; a Gaussian's may be negative)."""
        if self.spec.is_scalar:
            log_p = F.log_softmax(params, dim=-1)
            return -(torch.exp(log_p) * log_p).sum(-1)
        total = params.new_zeros(params.shape[:-1])
        for c, p in self._params(params):
            if c.kind == CATEGORICAL:
                log_p = F.log_softmax(p, dim=-1)
                total = total - (torch.exp(log_p) * log_p).sum(-1)
            elif c.kind == BERNOULLI:
                prob = torch.sigmoid(p)
                total = total - (prob * F.logsigmoid(p) + (1 - prob) * F.logsigmoid(-p)).sum(-1)
            else:
                log_std = p.chunk(2, dim=-1)[1]
                total = total + (log_std + 0.5 + _HALF_LOG_2PI).sum(-1)
        return total

    def kl(self, params: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """KL(pi_params || pi_other) per step, `[...]`."""
        if self.spec.is_scalar:
            log_p, log_q = F.log_softmax(params, dim=-1), F.log_softmax(other, dim=-1)
            return (torch.exp(log_p) * (log_p - log_q)).sum(-1)
        total = params.new_zeros(params.shape[:-1])
        for (c, p), (_, q) in zip(self._params(params), self._params(other)):
            if c.kind == CATEGORICAL:
                log_p, log_q = F.log_softmax(p, dim=-1), F.log_softmax(q, dim=-1)
                total = total + (torch.exp(log_p) * (log_p - log_q)).sum(-1)
            elif c.kind == BERNOULLI:
                prob = torch.sigmoid(p)
                on = prob * (F.logsigmoid(p) - F.logsigmoid(q))
                off = (1 - prob) * (F.logsigmoid(-p) - F.logsigmoid(-q))
                total = total + (on + off).sum(-1)
            else:
                m1, s1 = p.chunk(2, dim=-1)
                m2, s2 = q.chunk(2, dim=-1)
                ratio = (torch.exp(2 * s1) + (m1 - m2) ** 2) * torch.exp(-2 * s2)
                total = total + (s2 - s1 + 0.5 * ratio - 0.5).sum(-1)
        return total

    def gaussian_stats(
        self, params: torch.Tensor, actions: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Diagnostics of the Gaussian components over all steps and dimensions (detached
        0-dim tensors; {} without a Gaussian): `policy/log_std_mean` (the policy's mean
        log-std), `policy/mean_abs` (the mean |mean|, in units of half a bounded range: above
        1 the policy aims past the bounds) and `policy/beyond_bounds` (the fraction of the
        samples `u` outside [-1, 1]: on a bounded dimension the env gets them clipped or
        squashed)."""
        if self.spec.is_discrete:
            return {}
        with torch.no_grad():
            means, log_stds, samples = [], [], []
            for (c, p), (_, a) in zip(self._params(params), self._actions(actions)):
                if c.kind == GAUSSIAN:
                    mean, log_std = p.chunk(2, dim=-1)
                    means.append(mean.reshape(-1))
                    log_stds.append(log_std.reshape(-1))
                    samples.append(a.reshape(-1).to(p.dtype))
            u = torch.cat(samples)
            return {
                "policy/log_std_mean": torch.cat(log_stds).mean(),
                "policy/mean_abs": torch.cat(means).abs().mean(),
                "policy/beyond_bounds": (u.abs() > 1.0).to(u.dtype).mean(),
            }

    # -- what the actors read ----------------------------------------------------------
    def sample(self, params: torch.Tensor) -> torch.Tensor:
        """A sampled action per step, `[..., *spec.shape]` of `spec.dtype` (no gradient)."""
        with torch.no_grad():
            if self.spec.is_scalar:
                return _categorical_sample(params)
            parts = []
            for c, p in self._params(params):
                if c.kind == CATEGORICAL:
                    parts.append(_categorical_sample(p).unsqueeze(-1).to(p.dtype))
                elif c.kind == BERNOULLI:
                    parts.append(torch.bernoulli(torch.sigmoid(p)))
                else:
                    mean, log_std = p.chunk(2, dim=-1)
                    parts.append(mean + torch.exp(log_std) * torch.randn_like(mean))
            return self._stored(torch.cat(parts, dim=-1))

    def mode(self, params: torch.Tensor) -> torch.Tensor:
        """The most likely action per step (test mode's greedy action), as `sample`."""
        with torch.no_grad():
            if self.spec.is_scalar:
                return params.argmax(dim=-1)
            parts = []
            for c, p in self._params(params):
                if c.kind == CATEGORICAL:
                    parts.append(p.argmax(dim=-1, keepdim=True).to(p.dtype))
                elif c.kind == BERNOULLI:
                    parts.append((p > 0).to(p.dtype))
                else:
                    parts.append(p.chunk(2, dim=-1)[0])
            return self._stored(torch.cat(parts, dim=-1))

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions `[..., *spec.shape]` -> float32 features `[..., spec.encoding_size]`: a
        one-hot per categorical, the bits, `tanh` of the Gaussian samples (bounded inputs
        for the core, whatever the sample's size)."""
        if self.spec.is_scalar:
            return F.one_hot(actions.long(), self.spec.num_actions).float()
        parts = []
        for c, a in self._actions(actions):
            if c.kind == CATEGORICAL:
                parts.append(F.one_hot(a.long().squeeze(-1), c.size).float())
            elif c.kind == BERNOULLI:
                parts.append(a.float())
            else:
                parts.append(torch.tanh(a.float()))
        return torch.cat(parts, dim=-1)

    def _stored(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.long() if self.spec.is_discrete else flat.float()


def random_actions(spec: ActionSpec, shape: tuple[int, ...]) -> torch.Tensor:
    """Actions `[*shape, *spec.shape]` drawn from the policy with all parameters 0: uniform
    choices, fair bits, standard normal samples (benchmarks' and tests' inputs)."""
    return ActionDistribution(spec).sample(torch.zeros(*shape, spec.num_params))


__all__ = ["BERNOULLI", "CATEGORICAL", "GAUSSIAN", "ActionDistribution", "random_actions"]
