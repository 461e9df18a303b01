"""ViZDoom scenarios as gazelle's first-person 3D family (the `vizdoom` package: extra
`.[doom]`; headless, engine and Freedoom inside the wheel).

The `Vizdoom*-v1` ids that vizdoom registers with Gymnasium (`VizdoomBasic-v1`,
`VizdoomDefendCenter-v1`, ...) name a scenario's `.cfg`; gazelle drives the game itself
through `vizdoom.DoomGame` (as it drives Atari through the ALE), with the scenario's config
and these changes:

- the game renders at `resolution` (RES_160X120) in colour, channels first, without HUD,
  crosshair, decals or particles (the weapon stays); `frame` is that screen shrunk to
  `frame_size` (72x96, area interpolation): uint8 `[3, 72, 96]`, or `[3k, 72, 96]` with
  `frame_stack=k` (oldest first);
- `gamevariables` float32 `[3]`: health / 100, armour / 100, the selected weapon's ammo
  / 50, in every scenario (so that scenarios share one observation);
- actions: no-op, then each of the scenario's buttons alone (`VizdoomBasic-v1`: no-op,
  MOVE_LEFT, MOVE_RIGHT, ATTACK); `full_action_space=True`: no-op and each of
  `FULL_BUTTONS`, the union of the scenarios' buttons, in every scenario (the joint action
  set of a multi-task run, as the IMPALA paper's 18 Atari actions);
- each action is held for `num_action_repeats` tics (4), rewards summed;
- an episode ends `terminated` when the player dies or the scenario ends it, `truncated`
  when the scenario's timeout (`episode_timeout`) cuts it; on the end the last screen is
  repeated as the final observation (the game shows none) and `info["episode_stats"]`
  holds the game's totals (`STAT_VARIABLES`: kills, items, damage taken, final health and
  ammo, died).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from gazelle.envs.resize import AreaResize

#: Every button of the scenarios in `doom6` (and of Basic, DefendLine, TakeCover, ...).
FULL_BUTTONS = (
    "MOVE_FORWARD", "MOVE_BACKWARD", "MOVE_LEFT", "MOVE_RIGHT", "TURN_LEFT", "TURN_RIGHT",
    "ATTACK",
)  # fmt: skip
#: What the agent sees of the game's state: variable, scale.
OBS_VARIABLES = (("HEALTH", 100.0), ("ARMOR", 100.0), ("SELECTED_WEAPON_AMMO", 50.0))
#: Episode statistics: name in the logs -> game variable (read at the episode's end).
STAT_VARIABLES = {
    "kills": "KILLCOUNT",
    "items": "ITEMCOUNT",
    "damage_taken": "DAMAGE_TAKEN",
    "health": "HEALTH",
    "ammo": "SELECTED_WEAPON_AMMO",
}
#: The six scenarios of `doom6` (Sample Factory's "basic" ViZDoom set, with Basic in it).
DOOM6 = (
    "VizdoomBasic-v1", "VizdoomDefendCenter-v1", "VizdoomDefendLine-v1",
    "VizdoomHealthGathering-v1", "VizdoomMyWayHome-v1", "VizdoomDeadlyCorridor-v1",
)  # fmt: skip
#: The gymnasium entry point of vizdoom's scenario ids.
ENTRY_POINT = "vizdoom.gymnasium_wrapper.gymnasium_env_defns:VizdoomScenarioEnv"


def import_vizdoom() -> Any:
    try:
        import vizdoom
    except ImportError as err:
        raise ImportError(
            "ViZDoom is not installed: pip install 'gazelle[doom]' (or pip install vizdoom)"
        ) from err
    return vizdoom


def register_ids() -> bool:
    """Register vizdoom's `Vizdoom*` Gymnasium ids if vizdoom is installed (idempotent)."""
    import importlib.util

    if "VizdoomBasic-v1" in gymnasium.registry:
        return True
    if importlib.util.find_spec("vizdoom") is None:
        return False
    import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the ids)

    return True


def scenario_path(env_id: str) -> str:
    """The `.cfg` of a registered vizdoom id."""
    vizdoom = import_vizdoom()
    name = gymnasium.spec(env_id).kwargs["scenario_config_file"]
    return os.path.join(vizdoom.scenarios_path, name)


class DoomEnv(gymnasium.Env):
    """One ViZDoom scenario (see the module docstring).

    Args:
        config: path of the scenario's `.cfg`.
        frame_skip: tics each action is held (`num_action_repeats`).
        resolution: the game's render resolution, a `vizdoom.ScreenResolution` name.
        frame_size: `(height, width)` of `frame` (the screen is shrunk to it; at most the
            render resolution).
        frame_stack: screens stacked in `frame` (1: the LSTM carries the past).
        full_action_space: the buttons of `FULL_BUTTONS` instead of the scenario's.
        seed: seeds the first `reset()`'s game.
        render_mode: `None` or `"rgb_array"` (the rendered screen, `[H, W, 3]`).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 35}  # noqa: RUF012

    def __init__(
        self,
        config: str,
        *,
        frame_skip: int = 4,
        resolution: str = "RES_160X120",
        frame_size: tuple[int, int] = (72, 96),
        frame_stack: int = 1,
        full_action_space: bool = False,
        seed: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        vzd = import_vizdoom()
        if frame_skip < 1 or frame_stack < 1:
            raise ValueError("frame_skip and frame_stack must be >= 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode: None or 'rgb_array', got {render_mode!r}")
        self.render_mode, self._skip = render_mode, frame_skip
        game = vzd.DoomGame()
        game.load_config(config)
        # why: the engine writes its settings file (_vizdoom.ini) into the working
        # directory unless told where; each env gets its own, removed on close.
        self._ini_dir = tempfile.mkdtemp(prefix="gazelle-vizdoom-")
        game.set_doom_config_path(os.path.join(self._ini_dir, "_vizdoom.ini"))
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_screen_resolution(getattr(vzd.ScreenResolution, resolution))
        # why: channels first, so each colour plane is resized and stored as it comes.
        game.set_screen_format(vzd.ScreenFormat.CRCGCB)
        for setting in ("hud", "crosshair", "decals", "particles", "messages"):
            getattr(game, f"set_render_{setting}")(False)
        game.set_render_weapon(True)
        buttons = (
            FULL_BUTTONS
            if full_action_space
            else tuple(b.name for b in game.get_available_buttons())
        )
        game.set_available_buttons([getattr(vzd.Button, b) for b in buttons])
        variables = [v for v, _ in OBS_VARIABLES] + list(STAT_VARIABLES.values())
        names = list(dict.fromkeys(variables))
        game.set_available_game_variables([getattr(vzd.GameVariable, v) for v in names])
        self._var_index = {v: names.index(v) for v in names}
        self._scales = np.array([s for _, s in OBS_VARIABLES], np.float32)
        self._game, self._vzd = game, vzd
        self.button_names = ("NOOP", *buttons)
        # why: action 0 presses nothing, action i the (i-1)-th button alone.
        self._actions = np.eye(len(buttons) + 1, len(buttons), k=-1).tolist()
        height, width = game.get_screen_height(), game.get_screen_width()
        size = (int(frame_size[0]), int(frame_size[1]))
        self._resize = AreaResize((height, width), size)
        self._stack = np.zeros((3 * frame_stack, *size), np.uint8)
        self._screen = np.zeros((3, height, width), np.uint8)
        self._variables = np.zeros(len(names), np.float64)
        self.observation_space = spaces.Dict(
            {
                "frame": spaces.Box(0, 255, self._stack.shape, np.uint8),
                "gamevariables": spaces.Box(-np.inf, np.inf, (len(OBS_VARIABLES),), np.float32),
            }
        )
        self.action_space = spaces.Discrete(len(self._actions))
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self._started = False

    @property
    def action_meanings(self) -> list[str]:
        """Names of the actions, by index (`NOOP`, then button names)."""
        return list(self.button_names)

    def _observe(self, fresh: bool) -> dict[str, Any]:
        """The observation of the current state; with `fresh`, the stack is refilled."""
        state = self._game.get_state()
        if state is not None:  # why: None once the episode ended: keep the last screen
            np.copyto(self._screen, state.screen_buffer)
            self._variables[:] = state.game_variables
        planes = self._stack.shape[0]
        if not fresh:
            # why: oldest first: shift the stack by one screen (3 planes) towards index 0.
            self._stack[: planes - 3] = self._stack[3:]
        for c in range(3):
            self._resize(self._screen[c], out=self._stack[planes - 3 + c])
        if fresh:
            self._stack[: planes - 3] = np.tile(self._stack[planes - 3 :], (planes // 3 - 1, 1, 1))
        count = len(OBS_VARIABLES)
        variables = (self._variables[:count] / self._scales).astype(np.float32)
        return {"frame": self._stack.copy(), "gamevariables": variables}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._game.set_seed(int(self.np_random.integers(0, 2**31 - 1)))
        if not self._started:
            self._game.init()
            self._started = True
        else:
            self._game.new_episode()
        return self._observe(fresh=True), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        game = self._game
        reward = float(game.make_action(self._actions[int(action)], self._skip))
        ended = game.is_episode_finished()
        obs = self._observe(fresh=False)
        truncated = ended and game.is_episode_timeout_reached() and not game.is_player_dead()
        info: dict[str, Any] = {"game_over": ended}
        if ended:
            info["episode_stats"] = self.episode_stats()
        return obs, reward, ended and not truncated, truncated, info

    def episode_stats(self) -> dict[str, float]:
        """The game's totals now (`STAT_VARIABLES`), and whether the player died."""
        game, vzd = self._game, self._vzd
        stats = {
            name: float(game.get_game_variable(getattr(vzd.GameVariable, variable)))
            for name, variable in STAT_VARIABLES.items()
        }
        stats["died"] = float(game.is_player_dead())
        return stats

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.ascontiguousarray(np.transpose(self._screen, (1, 2, 0)))

    def close(self) -> None:
        self._game.close()
        shutil.rmtree(self._ini_dir, ignore_errors=True)


def make_doom(
    env_id: str,
    *,
    num_action_repeats: int = 4,
    seed: int | None = None,
    render_mode: str | None = None,
    **kwargs: Any,
) -> DoomEnv:
    """The gazelle env of a registered vizdoom id (`VizdoomBasic-v1`); `kwargs` are
    `DoomEnv`'s (`resolution`, `frame_size`, `frame_stack`, `full_action_space`)."""
    kwargs.pop("preset", None)
    return DoomEnv(
        scenario_path(env_id),
        frame_skip=num_action_repeats,
        seed=seed,
        render_mode=render_mode,
        **kwargs,
    )
