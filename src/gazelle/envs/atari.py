"""Atari through the Arcade Learning Environment with DeepMind's standard preprocessing.

The env drives `ale_py.ALEInterface` directly (one emulator step per frame, the screen read
only for the frames that are kept), which is several times cheaper than stacking Gymnasium
wrappers. Presets:

- `deepmind` (default): up to 30 no-op starts, frame skip = `num_action_repeats` (4) with a
  max over the last two frames, 84x84 grayscale (area interpolation), 4 stacked frames ->
  `frame` uint8 `[4, 84, 84]` (oldest first), a 108,000-frame game limit as truncation.
- `universe`: the A3C starter agent's frames: rows 34..193 cropped (the playing field), one
  42x42 grayscale frame -> uint8 `[1, 42, 42]`, frame skip 4 without max-pooling, no no-ops.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from gazelle.envs.resize import AreaResize
from gazelle.types import FRAME

PRESETS: dict[str, dict[str, Any]] = {
    "deepmind": {"frame_size": 84, "frame_stack": 4, "max_pool": True, "noop_max": 30,
                 "crop": None},
    "universe": {"frame_size": 42, "frame_stack": 1, "max_pool": False, "noop_max": 0,
                 "crop": (34, 194)},
}  # fmt: skip
#: The standard game limit: 108,000 emulator frames (30 minutes at 60 Hz), i.e. 27,000 agent
#: steps at frame skip 4.
MAX_FRAMES = 108_000
#: `repeat_action_probability` of the revisited ALE protocol (Machado et al., 2018).
STICKY_PROBABILITY = 0.25


class AtariEnv(gymnasium.Env):
    """One ALE game with preprocessing; see the module docstring for the presets.

    Args:
        game: ALE ROM id, e.g. `"pong"`, `"montezuma_revenge"`.
        frame_skip: emulator frames per agent step (the action repeats).
        sticky_actions: repeat the previous action with probability 0.25 at every frame.
        life_loss: a lost life ends the episode (`terminated`, `info["game_over"] = False`);
            the next `reset()` continues the same game.
        noop_max: a game starts with a uniform 1..noop_max no-ops (none when 0).
        max_frames: emulator frames per game (no-ops included) before truncation.
        frame_size: side of the square output frame.
        frame_stack: frames stacked along the channel axis, oldest first.
        max_pool: max over the last two frames of each skip (removes Atari flicker).
        crop: `(first_row, end_row)` of the 210-row screen kept before resizing.
        full_action_space: all 18 actions instead of the game's minimal set.
        fire_reset: where the game has a FIRE action, press FIRE and then the action set's
            third action (one agent step each) after every reset, including the reset that
            continues a game after a lost life (the classic DeepMind protocol: games such as
            Breakout do not start until FIRE is pressed).
        seed: seeds the emulator and the no-ops (`reset(seed=...)` reseeds both).
        render_mode: `None` or `"rgb_array"` (the full-colour screen).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}  # noqa: RUF012

    def __init__(
        self,
        game: str,
        *,
        frame_skip: int = 4,
        sticky_actions: bool = False,
        life_loss: bool = False,
        noop_max: int = 30,
        max_frames: int = MAX_FRAMES,
        frame_size: int = 84,
        frame_stack: int = 4,
        max_pool: bool = True,
        crop: tuple[int, int] | None = None,
        full_action_space: bool = False,
        fire_reset: bool = False,
        seed: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        import ale_py

        if frame_skip < 1 or frame_stack < 1 or noop_max < 0 or max_frames < 1:
            raise ValueError("frame_skip, frame_stack, max_frames must be >= 1, noop_max >= 0")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"Atari render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.game = game
        self._skip, self._life_loss, self._noop_max = frame_skip, life_loss, noop_max
        self._max_frames, self._max_pool = max_frames, max_pool and frame_skip >= 2
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        self._ale = ale_py.ALEInterface()
        self._ale.setFloat("repeat_action_probability", STICKY_PROBABILITY * sticky_actions)
        self._rom = ale_py.roms.get_rom_path(game)
        if self._rom is None:
            raise ValueError(f"no ALE ROM named {game!r}")
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self._load(int(self.np_random.integers(0, 2**31 - 1)))
        full = full_action_space
        self._actions = self._ale.getLegalActionSet() if full else self._ale.getMinimalActionSet()
        self._noop = ale_py.Action.NOOP
        # why: the classic wrapper presses FIRE, then action 2 of the set (needed by games
        # that wait for a second input), and only in games with FIRE and at least 3 actions.
        has_fire = len(self._actions) >= 3 and self._actions[1] == ale_py.Action.FIRE
        self._fire_actions = (self._actions[1], self._actions[2]) if fire_reset and has_fire else ()
        height, width = self._ale.getScreenDims()
        rows = crop if crop is not None else (0, height)
        self._crop = slice(*rows)
        self._resize = AreaResize((rows[1] - rows[0], width), (frame_size, frame_size))
        # why: screens[0] holds frame skip-2, screens[1] frame skip-1 of the current step.
        self._screens = np.zeros((2, height, width), np.uint8)
        self._stack = np.zeros((frame_stack, frame_size, frame_size), np.uint8)
        self.observation_space = spaces.Dict(
            {FRAME: spaces.Box(0, 255, self._stack.shape, np.uint8)}
        )
        self.action_space = spaces.Discrete(len(self._actions))
        self._lives = 0
        self._continue_game = False
        self._game_return = 0.0
        self._game_steps = 0

    @property
    def action_meanings(self) -> list[str]:
        """Names of the actions, by index (e.g. `NOOP`, `FIRE`, `RIGHT`)."""
        return [a.name for a in self._actions]

    @property
    def ale(self) -> Any:
        """The underlying `ale_py.ALEInterface` (for tests and tools)."""
        return self._ale

    def _load(self, ale_seed: int) -> None:
        # why: ALE reads `random_seed` only when a ROM is loaded, so reseeding means a reload.
        self._ale.setInt("random_seed", ale_seed)
        self._ale.loadROM(str(self._rom))

    def _grab(self, index: int) -> None:
        self._ale.getScreenGrayscale(self._screens[index])

    def _push(self, pooled: bool) -> None:
        """Preprocess the grabbed screen(s) and append the result to the frame stack."""
        screen = np.maximum(self._screens[0], self._screens[1]) if pooled else self._screens[1]
        # why: shift left by one so index 0 stays the oldest frame and -1 the newest.
        self._stack[:-1] = self._stack[1:]
        self._resize(screen[self._crop], out=self._stack[-1])

    def _info(self, game_over: bool) -> dict[str, Any]:
        return {
            "game_over": game_over,
            "lives": self._lives,
            "episode_frame_number": self._ale.getEpisodeFrameNumber(),
            "game_return": self._game_return,
            "game_length": self._game_steps,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start a new game (or, after a life-loss episode end, continue the current one)."""
        super().reset(seed=seed)
        if seed is not None:
            self._load(int(self.np_random.integers(0, 2**31 - 1)))
            self._continue_game = False
        if self._continue_game:
            self._continue_game = False
            # why: continue the game unless pressing FIRE ended it (then start a new one).
            if not (self._fire_actions and self._fire()):
                return {FRAME: self._stack.copy()}, self._info(False)
        self._ale.reset_game()
        noops = int(self.np_random.integers(1, self._noop_max + 1)) if self._noop_max else 0
        for _ in range(noops):
            self._ale.act(self._noop)
            if self._ale.game_over():
                self._ale.reset_game()
        self._game_return, self._game_steps = 0.0, 0
        if self._fire_actions and self._fire():
            self._ale.reset_game()  # why: the game ended during FIRE (never seen); start over
        self._grab(1)
        self._push(pooled=False)
        self._stack[:-1] = self._stack[-1]
        self._lives = self._ale.lives()
        return {FRAME: self._stack.copy()}, self._info(False)

    def _fire(self) -> bool:
        """Press FIRE, then the set's third action, one agent step each (frames pushed onto
        the stack, rewards counted in the game's return); returns whether the game ended."""
        for action in self._fire_actions:
            for t in range(self._skip):
                self._game_return += self._ale.act(action)
                if self._ale.game_over():
                    return True
                if t == self._skip - 2:
                    self._grab(0)
            self._grab(1)
            self._push(pooled=self._max_pool)
        self._lives = self._ale.lives()
        return False

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply `action` for `frame_skip` frames; reward is their (unclipped) sum."""
        ale, native, skip = self._ale, self._actions[int(action)], self._skip
        reward = 0.0
        over = truncated = False
        for t in range(skip):
            reward += ale.act(native)
            over = ale.game_over()
            truncated = ale.getEpisodeFrameNumber() >= self._max_frames
            if t == skip - 2:
                self._grab(0)
            if over or truncated or t == skip - 1:
                self._grab(1)
                break
        # why: pool only when screens[0] was grabbed in this step (t reached skip-2).
        self._push(pooled=self._max_pool and t >= skip - 2)
        self._game_return += reward
        self._game_steps += 1
        lives = ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        truncated = truncated and not over
        if self._life_loss and life_lost and not (over or truncated):
            self._continue_game = True
            return {FRAME: self._stack.copy()}, reward, True, False, self._info(False)
        game_over = over or truncated
        return {FRAME: self._stack.copy()}, reward, over, truncated, self._info(game_over)

    def render(self) -> np.ndarray | None:
        """The current full-colour screen `[210, 160, 3]` uint8 in `rgb_array` mode."""
        if self.render_mode == "rgb_array":
            return self._ale.getScreenRGB()
        return None


def make_atari(
    game: str,
    *,
    preset: str = "deepmind",
    frame_skip: int = 4,
    sticky_actions: bool = False,
    life_loss: bool = False,
    fire_reset: bool = False,
    seed: int | None = None,
    render_mode: str | None = None,
    **overrides: Any,
) -> AtariEnv:
    """Build an `AtariEnv` from a preset name, with keyword overrides of its settings."""
    if preset not in PRESETS:
        raise ValueError(f"unknown Atari preset {preset!r}; choose one of {sorted(PRESETS)}")
    settings = {**PRESETS[preset], **overrides}
    return AtariEnv(
        game,
        frame_skip=frame_skip,
        sticky_actions=sticky_actions,
        life_loss=life_loss,
        fire_reset=fire_reset,
        seed=seed,
        render_mode=render_mode,
        **settings,
    )
