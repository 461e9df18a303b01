"""Does the task need memory? A test of the Markov property on the batches a memoryless
agent trains on.

A feed-forward agent acts on what it sees now (the observation, the last reward and the last
action). If the env is Markov in that observation, what follows an action (the reward, the
episode's end, the next observation) depends on the past only through it; if the past
predicts it better, the agent lacks information that an LSTM could keep (a cue seen earlier,
a velocity from two positions). `MemoryCheck` fits two small predictors online, side by side:

- `now`: from the present inputs `u_t = (obs_t, r_t, a_{t-1})` and the action `a_t`;
- `past`: the same, plus exponential traces of the earlier inputs of the episode
  (`m_t = lam * m_{t-1} + (1 - lam) * u_{t-1}`, for lam in `TRACES`, reset at each episode's
  start; within an unroll, so a cue is visible up to `T` steps back),

of three targets after `a_t`: the reward (clipped to [-1, 1]), the episode's termination,
and the next observation (while the episode goes on). Each batch is first scored by both
(held-out: neither has trained on it), then trains both. `gain` per target is the error of
`now` that `past` removes, as a share of the target's variance (each error counted at most
at the variance, what the target's mean scores): 0 on a Markov task (the past adds nothing;
the models are the same but for their inputs), up to 1 when the past explains what the
present cannot.

Any action space is read: a `Discrete(n)` action picks the predictors' outputs for that
action; any other (a float Box, a composite) enters through its encoding (the agent's own,
`ActionDistribution.encode`), the outputs linear in it.

Only vector and discrete observation fields are read (images: an Atari agent's stacked
frames are its memory; a task of images with hidden state gets the LSTM by its preset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from gazelle.distributions import ActionDistribution
from gazelle.types import DISCRETE, VECTOR, ObsSpec

#: Decay of each trace of the past inputs: memories of ~2, ~10 and ~30 steps.
TRACES = (0.5, 0.9, 0.97)
#: Targets of the predictors, in the order of `MemoryCheck.gains`.
TARGETS = ("reward", "end", "next_obs")
#: A target needs the past when `past` removes at least `SHARE_OF_ERROR` of the error `now`
#: leaves and at least `SHARE_OF_VARIANCE` of the target's variance (the second keeps a
#: ratio of two tiny errors from counting). Measured: docs/notes/lstm.md, "Memory at
#: defaults".
SHARE_OF_ERROR = 0.15
SHARE_OF_VARIANCE = 0.03
#: ... and does so for `PERSIST` batches in a row (measured: Markov tasks crossed both
#: thresholds for up to 47 batches in a row early in their runs, 54 with the errors capped
#: at the variance; Memory-v0 for 223-251, 184-194 capped, in a window of 400).
PERSIST = 100
#: ... with the gain at the verdict at least `HOLD` of its largest in that run of batches: a
#: predictor that only learned faster for a while closes its gap again (measured: MountainCar
#: seed 2's next observation, 126 batches in a row, its gain 0.29 -> 0.06 by the 100th; the
#: 6 Memory-v0 runs held 0.9 or more of theirs; docs/notes/lstm.md, "A burst is not memory").
HOLD = 0.5
#: Batches scored before any verdict (the predictors need to learn first), the smoothing
#: of the scores (an exponential mean over ~1 / SMOOTHING batches), and the batches the
#: check looks at in all (then it stops: ~8 ms of a learner's core per batch). 500, not
#: 400: with the errors capped at the variance a verdict waits until the past predictor
#: beats the target's mean, and in a window of 400 IMPALA's verdicts on Memory-v0 came at
#: batch 306-316, A3C's at 246K-271K frames on 2 seeds of 3, the third's not within it.
WARMUP = 150
SMOOTHING = 0.02
WINDOW = 500
#: Optimiser steps of the predictors per batch.
STEPS = 2


def readable(spec: ObsSpec) -> bool:
    """Whether `spec` has a field `MemoryCheck` reads (vector or discrete)."""
    return any(f.kind in (VECTOR, DISCRETE) for f in spec.fields)


class _Normaliser:
    """Running mean and variance per feature (no gradient)."""

    def __init__(self, size: int) -> None:
        self.count, self.mean, self.var = 0.0, torch.zeros(size), torch.ones(size)

    def __call__(self, x: torch.Tensor, update: bool = True) -> torch.Tensor:
        if update:
            flat = x.reshape(-1, x.shape[-1]).double()
            n = float(flat.shape[0])
            total = self.count + n
            delta = flat.mean(0).float() - self.mean
            var = flat.var(0, unbiased=False).float()
            self.mean = self.mean + delta * n / total
            self.var = (
                self.var * self.count + var * n
            ) / total + delta**2 * self.count * n / total**2
            self.count = total
        return (x - self.mean) / (self.var.sqrt() + 1e-4)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread inside: the check's tensors are tiny, and on a busy 2-core machine
    its matmuls on two threads took 30x as long (6 ms each, waiting for the other core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _mlp(inputs: int, outputs: int, hidden: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))


class MemoryCheck:
    """Online Markov test of an env from its batches (module docstring).

    Args:
        spec: the agent's obs spec (only its vector and discrete fields are read).
        warn: called once with a line when the task seems to need memory.
        warmup: batches scored before a verdict.
        window: batches observed in all (`active` is False after them).
        seed: of the predictors' initial weights (a run's seed: the same verdicts again).
        persist: batches in a row a target must need the past for a verdict.
    """

    def __init__(
        self,
        spec: ObsSpec,
        warn: Callable[[str], None] = print,
        warmup: int = WARMUP,
        window: int = WINDOW,
        seed: int = 0,
        persist: int = PERSIST,
    ) -> None:
        self.fields = [f for f in spec.fields if f.kind in (VECTOR, DISCRETE)]
        if not self.fields:
            raise ValueError("MemoryCheck: the obs spec has no vector or discrete field")
        self.actions = ActionDistribution(spec.actions)
        #: Outputs per action (the taken one's are read) for one categorical action
        #: (`Discrete(n)`): an action's effect needs no product of inputs to be learned. Any
        #: other action (continuous, composite): outputs `o_0 + sum_j e_j o_j`, linear in
        #: the action's encoding `e` (`ActionDistribution.encode`), for the same reason.
        self.scalar = spec.actions.is_scalar
        action_size = spec.actions.encoding_size
        self.heads = spec.actions.num_actions if self.scalar else 1 + action_size
        self.obs_size = sum(int(f.shape[0]) for f in self.fields)
        now_size = self.obs_size + 1 + action_size  # u_t
        past_size = now_size + len(TRACES) * now_size
        self.targets = 2 + self.obs_size
        targets = self.heads * self.targets
        generator = torch.random.fork_rng()
        with generator:
            torch.manual_seed(seed)
            self.now, self.past = _mlp(now_size, targets), _mlp(past_size, targets)
        params = [*self.now.parameters(), *self.past.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=1e-2)
        self._lam = torch.tensor(TRACES).view(-1, 1, 1)
        self.norm_obs = _Normaliser(self.obs_size)
        self.norm_past = _Normaliser(past_size - now_size)
        self.warn, self.warmup, self.window = warn, warmup, window
        self.persist = persist
        self.batches = 0
        #: Batches in a row (to the last) in which some target needed the past, and each
        #: target's largest gain in them.
        self.streak = 0
        self.peaks = [0.0] * len(TARGETS)
        #: Smoothed held-out errors per target: `now`, `past`, and the target's variance.
        self.errors = torch.zeros(3, len(TARGETS))
        self.warned = False

    def _inputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """`[T+1, B, *]` batch -> per step t < T: `now` and `past` inputs, targets, the
        next-obs mask."""
        obs = torch.cat(
            [batch[f.name].float().flatten(2) for f in self.fields], dim=-1
        )  # [T+1, B, D]
        obs = self.norm_obs(obs)
        reward = batch["reward"].float().clamp(-1.0, 1.0).unsqueeze(-1)
        last_action = self.actions.encode(batch["action"])  # [T+1, B, A]
        done = batch["terminated"] | batch["truncated"]  # obs_t starts an episode
        present = torch.cat([obs, reward, last_action], dim=-1)  # u_t: [T+1, B, U]
        steps = present.shape[0]
        lam = self._lam  # [L, 1, 1]
        trace = present.new_zeros(len(TRACES), *present.shape[1:])  # [L, B, U]
        weight = present.new_zeros(len(TRACES), present.shape[1], 1)
        pasts = []
        for t in range(steps):
            # why: the traces hold u_0 .. u_{t-1} of obs_t's own episode: cleared where
            # obs_t starts one, then u_t joins them for step t + 1.
            keep = (~done[t]).float().unsqueeze(-1)
            trace, weight = trace * keep, weight * keep
            # why: a weighted mean of the inputs seen, not biased towards the zeros it
            # started from (an input 10 steps back keeps its size in a short episode).
            pasts.append(trace / weight.clamp_min(1e-6))
            trace = lam * trace + (1 - lam) * present[t]
            weight = lam * weight + (1 - lam)
        past = torch.stack(pasts).permute(0, 2, 1, 3).flatten(2)  # [T+1, B, L * U]
        past = self.norm_past(past)
        now_in = present[:-1]
        past_in = torch.cat([now_in, past[:-1]], dim=-1)
        ended = batch["terminated"][1:].float().unsqueeze(-1)
        # why: the change, not the next obs itself, whose slow parts the present explains.
        targets = torch.cat([reward[1:], ended, obs[1:] - obs[:-1]], dim=-1)
        # why: after an episode's end obs_{t+1} is the next episode's first: not predictable.
        goes_on = (~done[1:]).float()
        # why: action index t+1 was taken on obs_t, and reward/terminated at t+1 followed it.
        action = batch["action"][1:].long() if self.scalar else last_action[1:]
        return now_in, past_in, targets, goes_on, action

    def _losses(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                goes_on: torch.Tensor, action: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Mean squared error per target group `[len(TARGETS)]`."""
        out = model(inputs).unflatten(-1, (self.heads, self.targets))  # [T, B, heads, K]
        if self.scalar:  # action: [T, B] indices
            index = action[..., None, None].expand(*action.shape, 1, self.targets)
            predicted = out.gather(-2, index).squeeze(-2)
        else:  # action: [T, B, heads - 1] encodings
            predicted = out[..., 0, :] + (action.unsqueeze(-1) * out[..., 1:, :]).sum(-2)
        error = (predicted - targets).pow(2)  # [T, B, K]
        obs_error = (error[..., 2:].mean(-1) * goes_on).sum() / goes_on.sum().clamp_min(1.0)
        return torch.stack([error[..., 0].mean(), error[..., 1].mean(), obs_error])

    @property
    def active(self) -> bool:
        """Whether the check still wants batches (within its window, no verdict yet)."""
        return self.batches < self.window and not self.warned

    def observe(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Score a batch (`[T+1, B]` fields of the unroll contract), then train on it.
        Returns `memory/gain_<target>` for each target once warmed up (else {})."""
        with _one_thread():
            return self._observe(batch)

    def _observe(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        names = [f.name for f in self.fields] + ["reward", "action", "terminated", "truncated"]
        batch = {name: batch[name].cpu() for name in names}
        with torch.no_grad():
            now_in, past_in, targets, goes_on, action = self._inputs(batch)
        with torch.no_grad():
            now = self._losses(self.now, now_in, targets, goes_on, action)
            past = self._losses(self.past, past_in, targets, goes_on, action)
            variance = targets.flatten(0, 1).var(0, unbiased=False)
            obs_var = (targets[..., 2:].var(dim=(0, 1), unbiased=False)).mean()
            var = torch.stack([variance[0], variance[1], obs_var])
        scores = torch.stack([now, past, var])
        rate = 1.0 if self.batches == 0 else SMOOTHING
        self.errors = (1 - rate) * self.errors + rate * scores
        self.batches += 1
        for _ in range(STEPS):
            loss = (
                self._losses(self.now, now_in, targets, goes_on, action).sum()
                + self._losses(self.past, past_in, targets, goes_on, action).sum()
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        if self.batches < self.warmup:
            return {}
        gains = self._count()
        metrics = {f"memory/gain_{name}": value for name, value in zip(TARGETS, gains)}
        metrics["memory/needed"] = float(self.warned)
        return metrics

    def _count(self) -> list[float]:
        """After a scored batch: the run of batches that needed the past and its peak gains,
        then the verdict. Returns the gains."""
        gains = self.gains()
        if self.needing():
            self.streak += 1
            self.peaks = [max(peak, gain) for peak, gain in zip(self.peaks, gains)]
        else:
            self.streak, self.peaks = 0, [0.0] * len(TARGETS)
        self._verdict(gains)
        return gains

    def _held(self, gains: list[float]) -> list[int]:
        """The targets that need the past now with `HOLD` of their peak gain."""
        return [i for i in self.needing() if gains[i] >= HOLD * self.peaks[i]]

    def _capped(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The smoothed errors of `now` and `past`, each at most the target's variance, and
        the variance. Why: the target's mean predicts with an error of its variance, so a
        predictor above it has learned nothing yet. Uncapped, one that learned nothing
        twice over made a Markov task look memory-needing: A3C on Pendulum-v1 (seed 3),
        reward errors 1.7x and 1.0x the variance of a reward clipped almost always to -1,
        a "gain" of 0.7 (docs/notes/lstm.md, "A3C runs the check")."""
        now, past, var = self.errors
        return torch.minimum(now, var), torch.minimum(past, var), var

    def gains(self) -> list[float]:
        """Per target: (error of `now` - error of `past`) / the target's variance, each
        error capped at the variance (`_capped`)."""
        now, past, var = self._capped()
        # why: a target that never varies (CartPole's reward) has nothing to explain.
        gains = torch.where(var > 1e-4, (now - past) / var.clamp_min(1e-4), torch.zeros_like(var))
        return [float(g) for g in gains]

    def shares(self) -> list[float]:
        """Per target: the share of `now`'s error that `past` removes (errors capped)."""
        now, past, _ = self._capped()
        return [float(g) for g in (now - past) / now.clamp_min(1e-6)]

    def needing(self) -> list[int]:
        """The targets (indices into `TARGETS`) that need the past, after the warm-up."""
        if self.batches < self.warmup:
            return []
        return [
            i
            for i, (gain, share) in enumerate(zip(self.gains(), self.shares()))
            if gain >= SHARE_OF_VARIANCE and share >= SHARE_OF_ERROR
        ]

    def needs_memory(self) -> bool:
        """Whether some target has needed the past (`needing`) in each of the last `persist`
        batches (a Markov task's predictors cross the thresholds for a while as they learn)
        and one that needs it now keeps `HOLD` of its largest gain in them."""
        return self.streak >= self.persist and bool(self._held(self.gains()))

    def _verdict(self, gains: list[float]) -> None:
        if self.warned or not self.needs_memory():
            return
        self.warned = True
        best = max(self._held(gains), key=lambda i: gains[i])
        what = {"reward": "the reward", "end": "the episode's end", "next_obs": "the next "
                "observation"}[TARGETS[best]]  # fmt: skip
        self.warn(
            f"gazelle: warning: this task seems to need memory: the earlier observations of "
            f"an episode predict {what} after an action better than the present one does "
            f"({gains[best]:.0%} of its variance more), and this run's agent has no memory. "
            "Run it with --use-lstm (the LSTM core keeps what the agent has seen); "
            "memory/gain_* in the logs track the test (docs/notes/lstm.md)"
        )
