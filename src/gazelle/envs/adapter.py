"""Adapt any Gymnasium env to gazelle's observation and action contract.

Observations become a dict in gazelle's form (`gazelle.envs.spaces`), read by
`gazelle.envs.observations`: images (uint8, or bounded float Boxes) as uint8 `[C, H, W]`,
their layout read from the shape (`image_layout` where it is ambiguous); other Boxes and
MultiBinary as float32 vectors; a Dict or Tuple keeps its keys; a bare Text is `instruction`.
The action space stays the env's own: the env batch reads it
(`gazelle.envs.action_spaces`) and hands each env its native action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium
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

Obs = dict[str, Any]


class GymAdapter(gymnasium.Wrapper):
    """Wrap a Gymnasium env into gazelle's obs dict contract, with action repeats.

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
        if seed is not None:
            self.action_space.seed(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        obs, info = self.env.reset(seed=seed, options=options)
        return self._convert(obs), info

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        total = 0.0
        for _ in range(self._repeats):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        info.setdefault("game_over", bool(terminated or truncated))
        return self._convert(obs), total, bool(terminated), bool(truncated), info
