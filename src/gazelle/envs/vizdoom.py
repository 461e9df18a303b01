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
- the registered id's own settings: its `.cfg`, and the map, skill and any other game
  setting its registration names (`VizdoomFreedoom1E1M5-S3-v0` plays E1M5 at skill 3);
- actions (`gazelle.envs.doom_actions`): `doom_actions="single"`, a no-op and each button
  alone (`VizdoomBasic-v1`: NOOP, MOVE_LEFT, MOVE_RIGHT, ATTACK; a delta button such as
  TURN_LEFT_RIGHT_DELTA at minus and plus its range), `Discrete`; `"combos"`, one head per
  group of exclusive buttons, per other button and per delta button, `MultiDiscrete`
  (Basic: none/MOVE_LEFT/MOVE_RIGHT x none/ATTACK), so that buttons are pressed together;
  `"registered"`, as the id's `max_buttons_pressed` says (1: single, as the plain `-v1`
  ids; 0: combos, as the `-MultiBinary-v1` and the Doom/Freedoom map ids); unset:
  `DEFAULT_DOOM_ACTIONS`. `buttons=` acts with another set (the union of a multi-task run's
  levels: buttons a scenario lacks do nothing there); `full_action_space=True` without
  `buttons` acts with `family_buttons()`, every button of every scenario vizdoom registers;
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

from gazelle.envs.doom_actions import DEFAULT_DOOM_ACTIONS, DoomActions, actions_mode
from gazelle.envs.resize import AreaResize
from gazelle.envs.vizdoom_ids import (
    ENTRY_POINT,
    family_buttons,
    import_vizdoom,
    raw_kwargs,
    register_ids,
    registered_settings,
    scenario_buttons,
    scenario_path,
)

__all__ = [
    "DEFAULT_DOOM_ACTIONS", "DOOM6", "ENTRY_POINT", "DoomEnv", "family_buttons", "make_doom",
    "raw_kwargs", "register_ids", "scenario_buttons", "scenario_path",
]  # fmt: skip

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


class DoomEnv(gymnasium.Env):
    """One ViZDoom scenario (see the module docstring).

    Args:
        config: path of the scenario's `.cfg`.
        frame_skip: tics each action is held (`num_action_repeats`).
        resolution: the game's render resolution, a `vizdoom.ScreenResolution` name.
        frame_size: `(height, width)` of `frame` (the screen is shrunk to it; at most the
            render resolution).
        frame_stack: screens stacked in `frame` (1: the LSTM carries the past).
        actions: single | combos (`gazelle.envs.doom_actions`).
        buttons: the buttons the agent acts with; None: the scenario's own. Those the
            scenario lacks do nothing in it.
        delta_bins: values of a delta button's head in `combos`.
        settings: game settings applied after the `.cfg` (`DoomGame.set_config`: the
            registered id's `doom_map`, `doom_skill`, ...); the render settings above win.
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
        actions: str = "single",
        buttons: tuple[str, ...] | list[str] | None = None,
        delta_bins: int = 11,
        settings: dict[str, Any] | None = None,
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
        if settings and not game.set_config(dict(settings)):
            raise ValueError(f"ViZDoom settings {settings} for {config}: the engine refused them")
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
        own = tuple(b.name for b in game.get_available_buttons())
        unknown = [b for b in buttons or () if b not in vzd.Button.__members__]
        if unknown:
            raise ValueError(f"unknown ViZDoom buttons {unknown}; allowed: vizdoom.Button's")
        self._actions = DoomActions(own if buttons is None else buttons, own, actions, delta_bins)
        variables = [v for v, _ in OBS_VARIABLES] + list(STAT_VARIABLES.values())
        names = list(dict.fromkeys(variables))
        game.set_available_game_variables([getattr(vzd.GameVariable, v) for v in names])
        self._var_index = {v: names.index(v) for v in names}
        self._scales = np.array([s for _, s in OBS_VARIABLES], np.float32)
        self._game, self._vzd = game, vzd
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
        self.action_space = self._actions.space
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self._started = False

    @property
    def action_meanings(self) -> list[str]:
        """`single`: the actions' names by index (NOOP, then the buttons); `combos`: each
        head as `name: choice|choice` (`DoomActions.meanings`)."""
        return self._actions.meanings

    @property
    def action_heads(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """`(name, choice names)` of each head (one, named "", in `single`)."""
        return self._actions.heads

    @property
    def buttons(self) -> tuple[str, ...]:
        """The buttons the agent acts with."""
        return self._actions.buttons

    @property
    def game_buttons(self) -> tuple[str, ...]:
        """The buttons the game has (its scenario's)."""
        return self._actions.game_buttons

    def game_action(self, action: Any) -> list[float]:
        """The engine's button values (`game_buttons` order) for one action."""
        return self._actions(action)

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
        reward = float(game.make_action(self._actions(action), self._skip))
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
    doom_actions: str | None = None,
    full_action_space: bool = False,
    buttons: tuple[str, ...] | list[str] | None = None,
    **kwargs: Any,
) -> DoomEnv:
    """The gazelle env of a registered vizdoom id (`VizdoomBasic-v1`) with the id's own
    settings (map, skill, `max_buttons_pressed` for `doom_actions="registered"`).

    Args:
        doom_actions: single | combos | registered; None: `DEFAULT_DOOM_ACTIONS`.
        full_action_space: act with `family_buttons()` (unless `buttons` names the set).
        buttons: the buttons to act with (a multi-task run's union); None: the scenario's.
        kwargs: `DoomEnv`'s (`resolution`, `frame_size`, `frame_stack`, `delta_bins`).
    """
    kwargs.pop("preset", None)
    pressed, settings = registered_settings(env_id)
    if buttons is None and full_action_space:
        buttons = family_buttons()
    return DoomEnv(
        scenario_path(env_id),
        frame_skip=num_action_repeats,
        actions=actions_mode(doom_actions, pressed),
        buttons=buttons,
        settings=settings,
        seed=seed,
        render_mode=render_mode,
        **kwargs,
    )
