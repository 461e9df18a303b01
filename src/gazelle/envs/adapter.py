"""Adapt any Gymnasium env to gazelle's observation and action contract.

Observations become a dict in gazelle's form (`gazelle.envs.spaces`), read by
`gazelle.envs.observations`: images (uint8, or bounded float Boxes) as uint8 `[C, H, W]`,
their layout read from the shape (`image_layout` where it is ambiguous); other Boxes and
MultiBinary as float32 vectors; a Dict or Tuple keeps its keys; a bare Text is `instruction`.
Actions become
`Discrete(n)` indices `0..n-1`, mapped to the env's native action inside (the seed's
`action_set`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.envs.observations import (  # noqa: F401  (the names this module always had)
    MAX_INSTRUCTION_CHARS,
    dict_converter,
    frame_converter,
    instruction_space,
    key_converter,
    key_name,
    observation_converter,
)

#: Largest MultiDiscrete action product flattened into one Discrete set.
MAX_FLAT_ACTIONS = 4096

Obs = dict[str, Any]


def action_mapper(space: spaces.Space) -> tuple[int, Callable[[int], Any]]:
    """Return the number of discrete actions and the index -> native action function.

    Raises:
        ValueError: the space is continuous (Box) or otherwise not discrete.
    """
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return int(space.n), lambda i: start + i
    if isinstance(space, spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in space.nvec.reshape(-1))
        total = int(np.prod(nvec))
        if total > MAX_FLAT_ACTIONS:
            raise ValueError(
                f"action space {space} has {total} combinations (> {MAX_FLAT_ACTIONS})"
            )
        starts = space.start.reshape(-1)
        shape = space.nvec.shape

        def native(i: int) -> np.ndarray:
            return (np.array(np.unravel_index(i, nvec)) + starts).reshape(shape)

        return total, native
    kind = "continuous action space" if isinstance(space, spaces.Box) else "action space"
    raise ValueError(
        f"unsupported {kind} {space}: gazelle's agents choose one of n discrete actions; "
        "wrap the env to discretise it (e.g. a fixed set of Box actions) first"
    )


class GymAdapter(gymnasium.Wrapper):
    """Wrap a Gymnasium env into gazelle's obs dict and Discrete action contract.

    Args:
        env: any Gymnasium env.
        num_action_repeats: each agent action is applied this many times (rewards summed,
            stopping early at an episode end).
        seed: used by the first `reset()` that is given no seed.
        convert: optional `(space, fn)` replacing the default observation conversion; `fn`
            maps a native observation to the obs dict.
        image_layout: auto | hwc | chw: how images are read (`gazelle.envs.observations`).

    `info["game_over"]` is set on every step (True when the episode ended), unless the
    wrapped env sets it itself.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        num_action_repeats: int = 1,
        seed: int | None = None,
        convert: tuple[spaces.Dict, Callable[[Any], Obs]] | None = None,
        image_layout: str = "auto",
    ) -> None:
        super().__init__(env)
        if num_action_repeats < 1:
            raise ValueError(f"num_action_repeats must be >= 1, got {num_action_repeats}")
        self._repeats = num_action_repeats
        self._pending_seed = seed
        obs_space: spaces.Space[Any]
        obs_space, self._convert = convert or observation_converter(
            env.observation_space, image_layout
        )
        self.observation_space = obs_space
        n, self._native = action_mapper(env.action_space)
        self.action_space = spaces.Discrete(n)
        if seed is not None:
            self.action_space.seed(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        obs, info = self.env.reset(seed=seed, options=options)
        return self._convert(obs), info

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        native = self._native(int(action))
        total = 0.0
        for _ in range(self._repeats):
            obs, reward, terminated, truncated, info = self.env.step(native)
            total += float(reward)
            if terminated or truncated:
                break
        info.setdefault("game_over", bool(terminated or truncated))
        return self._convert(obs), total, bool(terminated), bool(truncated), info
