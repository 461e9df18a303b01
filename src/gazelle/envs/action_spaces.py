"""Any Gymnasium action space read as an `ActionSpec` (`action_spec_of`), and the function
that turns an agent's flat action back into the env's native one (`native_action`).

- `Discrete(n, start)`: one categorical of `n`; native `start + index`;
- `MultiDiscrete(nvec, start)`, any shape: one categorical per entry (independent heads);
  native an array of `nvec`'s shape, `start` added;
- `MultiBinary`, any shape: one bernoulli of `prod(shape)` bits; native int8 of the shape;
- `Box(low, high)` of floats, any shape: one gaussian of `prod(shape)` dimensions with the
  bounds; native the Box's dtype and shape, the samples on its bounds (`ActionSpec.env_values`);
- `Tuple`, `Dict`, nested: their members' components in order; native a tuple / dict.

Refused, with a one-line reason naming the space: an integer `Box` (wrap it into a
`MultiDiscrete`), `Text`, `Graph`, `Sequence`, `OneOf` and any other space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from gazelle.actions import (
    ACTION_BOUNDS,
    BERNOULLI,
    CATEGORICAL,
    GAUSSIAN,
    ActionComponent,
    ActionSpec,
)

Native = Callable[[np.ndarray], Any]

__all__ = ["action_spec_of", "native_action"]


def _refuse(space: spaces.Space[Any], name: str, why: str) -> ValueError:
    where = f" (action component {name!r})" if name else ""
    return ValueError(
        f"unsupported action space {space}{where}: {why}; gazelle takes Discrete, "
        "MultiDiscrete, MultiBinary, float Box, and Tuple or Dict of these"
    )


def _components(space: spaces.Space[Any], name: str) -> list[ActionComponent]:
    if isinstance(space, spaces.Discrete):
        return [ActionComponent(CATEGORICAL, int(space.n), name)]
    if isinstance(space, spaces.MultiDiscrete):
        nvec = space.nvec.reshape(-1)
        if len(nvec) == 1:
            return [ActionComponent(CATEGORICAL, int(nvec[0]), name)]
        prefix = f"{name}." if name else ""
        return [ActionComponent(CATEGORICAL, int(n), f"{prefix}{i}") for i, n in enumerate(nvec)]
    if isinstance(space, spaces.MultiBinary):
        return [ActionComponent(BERNOULLI, int(np.prod(space.shape)), name)]
    if isinstance(space, spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            why = "an integer Box has no distribution here (use MultiDiscrete)"
            raise _refuse(space, name, why)
        low = tuple(float(v) for v in np.asarray(space.low, np.float64).reshape(-1))
        high = tuple(float(v) for v in np.asarray(space.high, np.float64).reshape(-1))
        return [ActionComponent(GAUSSIAN, len(low), name, low, high)]
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        prefix = f"{name}." if name else ""
        found = [c for key, sub in items for c in _components(sub, f"{prefix}{key}")]
        if not found:
            raise _refuse(space, name, "it is empty")
        return found
    raise _refuse(space, name, f"{type(space).__name__} has no action distribution")


def action_spec_of(space: spaces.Space[Any]) -> ActionSpec:
    """The `ActionSpec` of a Gymnasium action space (module docstring).

    Raises:
        ValueError: a space gazelle cannot act in, named with the reason.
    """
    return ActionSpec(tuple(_components(space, "")))


def _native_fn(space: spaces.Space[Any], bounds: str) -> tuple[int, Native]:
    """`(slots, fn)`: how many flat values the space takes, and values -> native action."""
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return 1, lambda v: start + int(v[0])
    if isinstance(space, spaces.MultiDiscrete):
        shape, starts = space.nvec.shape, space.start
        size = int(np.prod(shape))
        return size, lambda v: (np.asarray(v, np.int64).reshape(shape) + starts).astype(space.dtype)
    if isinstance(space, spaces.MultiBinary):
        shape = tuple(space.shape)
        size = int(np.prod(shape))
        return size, lambda v: np.asarray(v, np.int8).reshape(shape)
    if isinstance(space, spaces.Box):
        shape, dtype = space.shape, space.dtype
        spec = ActionSpec(tuple(_components(space, "")))
        size = spec.slots

        def box(v: np.ndarray) -> np.ndarray:
            values = spec.env_values(v, bounds).reshape(shape)
            # why: float rounding may put a bound a hair outside the Box.
            return np.clip(values, space.low, space.high).astype(dtype)

        return size, box
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        keyed = isinstance(space, spaces.Dict)
        items: list[tuple[Any, spaces.Space[Any]]] = (
            list(space.spaces.items())
            if isinstance(space, spaces.Dict)
            else list(enumerate(space.spaces))
        )
        parts = [(key, *_native_fn(sub, bounds)) for key, sub in items]
        total = sum(size for _, size, _ in parts)

        def composite(v: np.ndarray) -> Any:
            values, start, out = np.asarray(v).reshape(-1), 0, []
            for key, size, fn in parts:
                out.append((key, fn(values[start : start + size])))
                start += size
            return dict(out) if keyed else tuple(value for _, value in out)

        return total, composite
    raise _refuse(space, "", f"{type(space).__name__} has no action distribution")


def native_action(space: spaces.Space[Any], bounds: str = "clip") -> Native:
    """The function mapping one env's stored action (a scalar index, or `[slots]` values as
    `gazelle.actions` stores them) to the native action of `space`; Gaussian samples are
    brought onto the Box's bounds by `bounds` (clip | tanh; `ActionSpec.env_values`).

    Raises:
        ValueError: an unsupported space or `bounds`.
    """
    if bounds not in ACTION_BOUNDS:
        raise ValueError(f"action bounds {bounds!r}; allowed: {', '.join(ACTION_BOUNDS)}")
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return lambda action: start + int(action)  # why: every step of every Atari env
    slots, fn = _native_fn(space, bounds)
    return lambda action: fn(np.asarray(action).reshape(slots))
