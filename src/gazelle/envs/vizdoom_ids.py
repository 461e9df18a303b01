"""What vizdoom registers for its Gymnasium ids (`VizdoomBasic-v1`, the map ids, ...): the
scenario's `.cfg`, `max_buttons_pressed`, the game settings (map, skill, ...) and buttons,
read without starting the engine; and the keyword arguments of vizdoom's own env
(`--raw-obs`)."""

from __future__ import annotations

import os
from typing import Any

import gymnasium

from gazelle.envs.doom_actions import actions_mode, config_buttons, union_buttons

#: The gymnasium entry point of vizdoom's scenario ids.
ENTRY_POINT = "vizdoom.gymnasium_wrapper.gymnasium_env_defns:VizdoomScenarioEnv"

#: Keyword arguments of vizdoom's own env that are not game settings.
_ENV_ARGS = ("scenario_config_file", "max_buttons_pressed", "frame_skip", "render_mode",
             "treat_episode_timeout_as_truncation", "use_multi_binary_action_space")  # fmt: skip


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


def registered_settings(env_id: str) -> tuple[int, dict[str, Any]]:
    """`(max_buttons_pressed, game settings)` that vizdoom registers for `env_id`: the
    settings (`doom_map`, `doom_skill`, ...) are what its env hands `DoomGame.set_config`."""
    kwargs = dict(gymnasium.spec(env_id).kwargs)
    pressed = int(kwargs.get("max_buttons_pressed", 0))
    return pressed, {k: v for k, v in kwargs.items() if k not in _ENV_ARGS}


def scenario_buttons(env_id: str) -> tuple[str, ...]:
    """The buttons of a registered vizdoom id's game, in its order."""
    _, settings = registered_settings(env_id)
    # why: of the settings only the buttons matter here (the map ids differ in map and
    # skill alone: one engine-free read per .cfg).
    own = [(k, v) for k, v in settings.items() if k.replace("_", "").lower() == "availablebuttons"]
    return config_buttons(scenario_path(env_id), tuple((k, tuple(v)) for k, v in own))


def family_buttons() -> tuple[str, ...]:
    """Every button of every scenario vizdoom registers (22 with vizdoom 1.3)."""
    register_ids()
    ids = [k for k, s in gymnasium.registry.items() if s.entry_point == ENTRY_POINT]
    # why: the map ids share four .cfg files; one id per distinct config and settings.
    return union_buttons([scenario_buttons(i) for i in ids])


def raw_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` for vizdoom's own env (`--raw-obs`): `doom_actions` single / combos as its
    `max_buttons_pressed` 1 / 0 (registered or unset: the id's own), `buttons` or
    `full_action_space` as its `available_buttons` (there every one of them acts)."""
    out = dict(kwargs)
    mode = out.pop("doom_actions", None)
    if mode not in (None, "registered"):
        out["max_buttons_pressed"] = {"single": 1, "combos": 0}[actions_mode(mode, 1)]
    out.pop("delta_bins", None)
    buttons, full = out.pop("buttons", None), out.pop("full_action_space", False)
    if buttons is None and full:
        buttons = family_buttons()
    if buttons is not None:
        out["available_buttons"] = list(buttons)
    return out
