"""BabyAI and MiniGrid tasks (the `minigrid` package) as instruction-following envs.

Observation: `instruction` is the env's `mission` text ("go to the red ball"); `frame` is the
7x7 egocentric symbolic grid (object, colour, state per cell) drawn as uint8 `[3, 56, 56]`:
each cell becomes an 8x8 block, and each channel is scaled to spread its few values over
0..255 (object x 25, colour x 50, state x 120). 56x56 is accepted by every torso (the nature
torso needs >= 36x36, the deep ResNet >= 8x8), at no rendering cost. Actions: MiniGrid's 7.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.envs.adapter import GymAdapter, instruction_space
from gazelle.types import FRAME, INSTRUCTION

#: Pixels per grid cell side in the frame.
CELL_PIXELS = 8
#: Cells per side of MiniGrid's default egocentric view.
VIEW_CELLS = 7
#: Per-channel scale of the symbolic values: object index (0..10), colour (0..5), state (0..2).
CHANNEL_SCALE = np.array([25, 50, 120], dtype=np.uint16)
#: The `frame` shape of every BabyAI/MiniGrid env.
FRAME_SHAPE = (3, VIEW_CELLS * CELL_PIXELS, VIEW_CELLS * CELL_PIXELS)


def grid_to_frame(image: np.ndarray) -> np.ndarray:
    """Symbolic grid uint8 `[7, 7, 3]` indexed `[x, y, channel]` (MiniGrid's layout) -> uint8
    `[3, 56, 56]` indexed `[channel, row=y, column=x]`, each cell an 8x8 block, channels
    scaled by `CHANNEL_SCALE`. The agent sits at the bottom centre, facing up."""
    scaled = np.minimum(image.astype(np.uint16) * CHANNEL_SCALE, 255).astype(np.uint8)
    chw = np.transpose(scaled, (2, 1, 0))
    size = CELL_PIXELS
    c, h, w = chw.shape
    # why: broadcast each cell over a size x size block, then merge (cell, pixel) axes.
    blocks = np.broadcast_to(chw[:, :, None, :, None], (c, h, size, w, size))
    return blocks.reshape(c, h * size, w * size)


def _convert(obs: dict[str, Any]) -> dict[str, Any]:
    return {FRAME: grid_to_frame(obs["image"]), INSTRUCTION: str(obs["mission"])}


class _QuietReset(gymnasium.Wrapper):
    """Swallow the "Sampling rejected" lines some BabyAI levels print while generating."""

    def reset(self, **kwargs: Any) -> Any:
        # why: redirect_stdout swaps sys.stdout process-wide for the duration of reset only.
        with contextlib.redirect_stdout(io.StringIO()):
            return self.env.reset(**kwargs)


def make_babyai(
    env_id: str,
    *,
    seed: int | None = None,
    num_action_repeats: int = 1,
    render_mode: str | None = None,
    quiet: bool = True,
    **kwargs: Any,
) -> GymAdapter:
    """Make a MiniGrid/BabyAI id with the instruction + 56x56 symbolic frame observation."""
    import minigrid  # noqa: F401  (registers the MiniGrid and BabyAI ids)

    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gymnasium.make(env_id, **kwargs)
    image = (
        env.observation_space["image"] if isinstance(env.observation_space, spaces.Dict) else None
    )
    if image is None or image.shape != (VIEW_CELLS, VIEW_CELLS, 3):
        raise ValueError(
            f"{env_id}: expected MiniGrid's 7x7x3 'image' observation, got {env.observation_space}"
        )
    if quiet:
        env = _QuietReset(env)
    obs_space = spaces.Dict(
        {FRAME: spaces.Box(0, 255, FRAME_SHAPE, np.uint8), INSTRUCTION: instruction_space()}
    )
    return GymAdapter(
        env, num_action_repeats=num_action_repeats, seed=seed, convert=(obs_space, _convert)
    )
