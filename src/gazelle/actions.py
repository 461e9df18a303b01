"""An env's actions in gazelle's form: the `ActionSpec`, the action counterpart of `ObsSpec`.

An action is a tuple of independent *components*, each with a distribution family:

| component     | from the env space             | stored values    | parameters              |
| ------------- | ------------------------------ | ---------------- | ----------------------- |
| `categorical` | `Discrete(n)`, `MultiDiscrete` | 1 index `0..n-1` | `n` logits              |
| `bernoulli`   | `MultiBinary` (`n` bits)       | `n` values 0 / 1 | `n` logits              |
| `gaussian`    | float `Box` (`n` dimensions)   | `n` samples `u`  | `n` means, `n` log-stds |

(a `MultiDiscrete` is one categorical per entry; shapes are flattened.)

`Tuple` and `Dict` spaces of these (nested too) are several components, in the space's
order. The policy's distribution is the product of the components' (log-probabilities and
entropies are sums over components; `gazelle.distributions`).

Storage: an action of one env is a flat array of `slots` values: int64 when every component
is discrete (categorical, bernoulli), float32 when any is Gaussian. An env with a single
categorical component (every Atari, DMLab and ViZDoom one-button env) stores a scalar int64
index, as gazelle always has. The policy's output is a flat float vector of `num_params`
distribution parameters (`policy_logits` in the unroll).

A Gaussian component's sample `u` is what the unroll stores and what the importance ratios
are computed on; the env receives it mapped onto the Box's bounds (`env_values`): for each
bounded dimension `low + (f(u) + 1) / 2 * (high - low)` with `f` a clip to [-1, 1]
(`clip`, the default) or `tanh` (`tanh`), so one unit of `u` is half the dimension's range
whatever its bounds; an unbounded dimension receives `u` itself.

This module imports nothing of gazelle and no torch: env processes read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CATEGORICAL, BERNOULLI, GAUSSIAN = "categorical", "bernoulli", "gaussian"
ACTION_KINDS = (CATEGORICAL, BERNOULLI, GAUSSIAN)
#: How a Gaussian sample is brought inside a Box's bounds (`env_values`).
ACTION_BOUNDS = ("clip", "tanh")


@dataclass(frozen=True)
class ActionComponent:
    """One independent part of an action.

    Attributes:
        kind: categorical | bernoulli | gaussian (`ACTION_KINDS`).
        size: choices (categorical), bits (bernoulli) or dimensions (gaussian).
        name: where the component sits in the env's native action: "" for a bare space,
            a Dict key or Tuple index, dotted when nested ("move.turn").
        low, high: gaussian only: per-dimension bounds (`-inf`/`inf` where unbounded).
    """

    kind: str
    size: int
    name: str = ""
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"action component {self.name!r}: kind {self.kind!r}; allowed: "
                             f"{', '.join(ACTION_KINDS)}")  # fmt: skip
        if self.size < 1:
            raise ValueError(f"action component {self.name!r}: size {self.size} (must be >= 1)")
        if self.kind == GAUSSIAN:
            if len(self.low) != self.size or len(self.high) != self.size:
                raise ValueError(f"action component {self.name!r}: {self.size} dimensions "
                                 f"need {self.size} bounds each")  # fmt: skip
            if any(not lo < hi for lo, hi in zip(self.low, self.high)):
                raise ValueError(f"action component {self.name!r}: each low must be below "
                                 f"its high, got {self.low} and {self.high}")  # fmt: skip
        elif self.low or self.high:
            raise ValueError(f"action component {self.name!r}: only gaussian ones have bounds")

    @property
    def slots(self) -> int:
        """Values of this component in the flat action."""
        return 1 if self.kind == CATEGORICAL else self.size

    @property
    def params(self) -> int:
        """Distribution parameters: logits, or means then log-stds."""
        return 2 * self.size if self.kind == GAUSSIAN else self.size

    def describe(self) -> str:
        """`move: 3 choices`, `buttons: 4 bits`, `2 continuous` (for messages)."""
        what = {CATEGORICAL: "choices", BERNOULLI: "bits", GAUSSIAN: "continuous"}[self.kind]
        return f"{self.name}: {self.size} {what}" if self.name else f"{self.size} {what}"


@dataclass(frozen=True)
class ActionSpec:
    """The actions of an env: independent components (see the module docstring)."""

    components: tuple[ActionComponent, ...]

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("an action spec needs at least one component")

    @classmethod
    def categorical(cls, n: int) -> ActionSpec:
        """One of `n` actions (`Discrete(n)`)."""
        return cls((ActionComponent(CATEGORICAL, int(n)),))

    @property
    def is_scalar(self) -> bool:
        """One categorical component: actions are int64 scalars (gazelle's classic form)."""
        return len(self.components) == 1 and self.components[0].kind == CATEGORICAL

    @property
    def is_discrete(self) -> bool:
        """No Gaussian component: actions are stored as int64."""
        return all(c.kind != GAUSSIAN for c in self.components)

    @property
    def num_actions(self) -> int:
        """The number of actions of a one-categorical spec.

        Raises:
            ValueError: for any other spec (several components, buttons, continuous).
        """
        if not self.is_scalar:
            raise ValueError(f"{self.describe()} is not one set of discrete actions")
        return self.components[0].size

    @property
    def slots(self) -> int:
        """Values in one flat action."""
        return sum(c.slots for c in self.components)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one env's stored action: `()` for a scalar spec, else `(slots,)`."""
        return () if self.is_scalar else (self.slots,)

    @property
    def dtype(self) -> np.dtype:
        """int64 when every component is discrete, else float32."""
        return np.dtype(np.int64 if self.is_discrete else np.float32)

    @property
    def num_params(self) -> int:
        """Distribution parameters per step (the length of `policy_logits`)."""
        return sum(c.params for c in self.components)

    @property
    def encoding_size(self) -> int:
        """Features of the last action as the agent's core reads it: one-hot per
        categorical, the bits, the (tanh of the) Gaussian samples."""
        return sum(c.size for c in self.components)

    def zeros(self, num_envs: int) -> np.ndarray:
        """A batch of `num_envs` zero actions, `[num_envs, *shape]`."""
        return np.zeros((num_envs, *self.shape), self.dtype)

    def env_values(self, action: np.ndarray, bounds: str = "clip") -> np.ndarray:
        """One env's stored action -> the flat values the env receives, float64 `[slots]`
        (discrete values unchanged; Gaussian samples onto their bounds, module docstring).

        Raises:
            ValueError: an unknown `bounds`.
        """
        if bounds not in ACTION_BOUNDS:
            raise ValueError(f"action bounds {bounds!r}; allowed: {', '.join(ACTION_BOUNDS)}")
        flat = np.asarray(action, np.float64).reshape(-1)
        if self.is_discrete:
            return flat
        out = flat.copy()
        start = 0
        for c in self.components:
            if c.kind == GAUSSIAN:
                u = flat[start : start + c.size]
                low, high = np.asarray(c.low), np.asarray(c.high)
                finite = np.isfinite(low) & np.isfinite(high)
                # why: an unbounded dimension's (infinite) bounds stay out of the arithmetic.
                low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)
                unit = np.tanh(u) if bounds == "tanh" else np.clip(u, -1.0, 1.0)
                scaled = low + (unit + 1.0) * 0.5 * (high - low)
                out[start : start + c.size] = np.where(finite, scaled, u)
            start += c.slots
        return out

    def describe(self) -> str:
        """`6 actions`, or the components (`move: 3 choices, buttons: 4 bits`)."""
        if self.is_scalar:
            return f"{self.num_actions} actions"
        return ", ".join(c.describe() for c in self.components)
