"""`gazelle/Catch-v0`: a pixel task with Pong's difficulty at a size that trains in minutes.

A ball (2x2 pixels, as small in an 84x84 frame as Pong's ball) falls straight down one row
per step from a random column; a paddle (8x2 pixels) on the bottom row moves left, stays or
moves right. When the ball reaches the bottom, the episode ends with reward +1 if the paddle
is under it, else -1. Nothing else rewards, so the reward comes once per `rows - 1` steps
(7 by default), and the only informative pixels are the ball's 4 and the paddle's 16 on a
flat background: what the agent must learn to see is as small as in Pong.

The rewarded action depends on the frame and on nothing else: the ball's column and the
paddle's start are drawn anew each episode and shown only in the frame. Since only the
paddle's final column counts and the ball's column is uniform and independent of anything an
agent can see without the frame (its last action and reward, through the core), such an
agent catches with probability `1 / columns` whatever it does: return `-1 + 2 / columns`
(-0.6 with the default 5 columns). A seeing agent catches every ball (the paddle needs at most
`columns - 1` moves and has `rows - 1 > columns` steps): return 1.

`frame` uint8 `[1, 84, 84]`: background 87, ball and paddle 236 (Pong's luminances).
Actions: 0 left, 1 stay, 2 right.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.types import FRAME

SIZE = 84
BACKGROUND, FOREGROUND = 87, 236


class CatchEnv(gymnasium.Env):
    """See the module docstring.

    The default size (5 x 8) trains in minutes on a 2-core CPU with the Atari defaults
    (docs/results.md); 10 x 20 did not leave chance in 0.43M frames.

    Args:
        columns: ball and paddle positions across the frame (each 8 pixels wide).
        rows: ball positions down the frame (each 4 pixels high); an episode is `rows - 1`
            steps.
    """

    def __init__(self, columns: int = 5, rows: int = 8) -> None:
        if not 2 <= columns <= SIZE // 8 or not columns < rows <= SIZE // 4:
            raise ValueError(
                f"need 2 <= columns <= {SIZE // 8} and columns < rows <= {SIZE // 4}, "
                f"got columns={columns}, rows={rows}"
            )
        self.columns, self.rows = columns, rows
        self.observation_space = spaces.Dict({FRAME: spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)})
        self.action_space = spaces.Discrete(3)
        # why: centre the grid of columns x 8 pixels in the 84-pixel width.
        self._left = (SIZE - 8 * columns) // 2
        self._ball_column = self._ball_row = self._paddle = 0

    def _obs(self) -> dict[str, Any]:
        frame = np.full((1, SIZE, SIZE), BACKGROUND, np.uint8)
        x = self._left + 8 * self._ball_column + 3
        y = 4 * self._ball_row + 1
        frame[0, y : y + 2, x : x + 2] = FOREGROUND
        x = self._left + 8 * self._paddle
        y = 4 * (self.rows - 1) + 2
        frame[0, y : y + 2, x : x + 8] = FOREGROUND
        return {FRAME: frame}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._ball_column = int(self.np_random.integers(self.columns))
        self._paddle = int(self.np_random.integers(self.columns))
        self._ball_row = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        move = int(action) - 1
        self._paddle = min(max(self._paddle + move, 0), self.columns - 1)
        self._ball_row += 1
        done = self._ball_row >= self.rows - 1
        reward = 0.0
        if done:
            reward = 1.0 if self._paddle == self._ball_column else -1.0
        return self._obs(), reward, done, False, {"game_over": done}
