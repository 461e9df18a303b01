"""An env's observation space in gazelle's form, read into the one `ObsSpec` every part of a
run shares (`obs_spec_of`).

gazelle's form of an observation is a Dict whose keys each hold one field
(`gazelle.types.ObsField`):

| space                                      | field    | one step                   |
| ------------------------------------------ | -------- | -------------------------- |
| `Box` uint8 `[C, H, W]`                    | image    | uint8 `[C, H, W]`          |
| `Box` `[D]` (any number type)              | vector   | float32 `[D]`              |
| `MultiDiscrete(nvec)`, 1-D, starting at 0  | discrete | int64 `[K]`                |
| `Text`, or any space of `str`              | text     | `str` (token ids `[32]`)   |

Images are stored as bytes whatever the env gives: float pixels are quantised to uint8 by
the adapter (their Box bounds mapped onto 0..255) and the image torsos scale them to [0, 1]
inside the model, so one unroll slot, one Ray array and one torso input serve every image.

`gazelle.envs.adapter.GymAdapter` brings any Gymnasium space into this form
(`gazelle.envs.observations`: HWC or CHW images, float images, Tuples, a bare Text); gazelle's
own envs (Atari, DMLab, ViZDoom, the diagnostic tasks) declare it directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from gazelle.envs.action_spaces import action_spec_of
from gazelle.types import (
    FRAME,
    ObsField,
    ObsSpec,
    discrete_field,
    image_field,
    text_field,
    vector_field,
)


def is_text(space: spaces.Space[Any]) -> bool:
    """Whether `space` holds strings (`Text`, MiniGrid's `MissionSpace`, ...): a `Text`, a
    space of dtype `str`, or a space of another kind whose samples are strings."""
    if isinstance(space, spaces.Text) or space.dtype is str:
        return True
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return False
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return False
    try:
        return isinstance(space.sample(), str)
    except Exception:  # why: a space of the env's own that cannot sample is not text
        return False


def field_of(name: str, space: spaces.Space[Any]) -> ObsField:
    """The field of key `name` with (already converted) space `space`.

    Raises:
        ValueError: a space not in gazelle's form (see the module docstring).
    """
    if isinstance(space, spaces.Box):
        shape = tuple(space.shape)
        if len(shape) == 3 and space.dtype == np.uint8:
            return image_field(name, shape)
        if len(shape) == 1:
            return vector_field(name, shape[0])
    elif isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        if not np.all(space.start == 0):
            raise ValueError(f"observation {name!r}: MultiDiscrete must start at 0, got {space}")
        return discrete_field(name, tuple(int(n) for n in space.nvec))
    elif is_text(space):
        return text_field(name)
    raise ValueError(
        f"observation {name!r}: {space} is not in gazelle's form (uint8 [C, H, W] Box, [D] Box,"
        " 1-D MultiDiscrete or Text); GymAdapter converts any Box, Discrete, MultiDiscrete,"
        " MultiBinary, Text, or a Dict or Tuple of them"
    )


def obs_spec_of(observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> ObsSpec:
    """`ObsSpec` of an env with gazelle's observations (a Dict in the form above, or a bare
    `[C, H, W]` uint8 / `[D]` Box taken as `frame`) and any action space that
    `gazelle.envs.action_spaces` reads. `frame` comes first; the other keys keep the space's
    order.

    Raises:
        ValueError: a space gazelle cannot describe.
    """
    actions = action_spec_of(action_space)
    members = (
        dict(observation_space.spaces)
        if isinstance(observation_space, spaces.Dict)
        else {FRAME: observation_space}
    )
    fields = [field_of(str(name), space) for name, space in members.items()]
    fields.sort(key=lambda f: f.name != FRAME)  # why: stable, so only frame moves
    return ObsSpec(fields=tuple(fields), actions=actions)
