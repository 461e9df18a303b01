"""ViZDoom's buttons as an agent's actions (`DoomActions`), and the joint button set of
several scenarios (`union_buttons`). No engine runs here: a scenario's buttons are read
from its `.cfg`.

Two forms (`mode`):

- `single`: one button at a time, `Discrete(1 + b + 2d)`: a no-op, each of the `b` binary
  buttons alone, each of the `d` delta buttons alone at minus and plus its range (vizdoom's
  own `max_buttons_pressed=1`; gazelle's only form before issue 51);
- `combos`: independent heads, `MultiDiscrete`: one categorical per group of mutually
  exclusive binary buttons (`EXCLUSIVE`: none / MOVE_LEFT / MOVE_RIGHT, none / TURN_LEFT /
  TURN_RIGHT, none / MOVE_FORWARD / MOVE_BACKWARD, none / SELECT_WEAPON1 / ... ), an
  on/off head for each other binary button (ATTACK, USE, SPEED, ...), and one head per delta
  button over `delta_bins` values: 0, then evenly from minus to plus its range. Choice 0 of
  every head presses nothing. Moving, turning and attacking then happen in one step.

Why groups rather than one bit per button (vizdoom's `MultiBinary`, its
`max_buttons_pressed=0`): two opposite buttons pressed together cancel (MOVE_LEFT with
MOVE_RIGHT stands still), so bits give a second, third and fourth way to do nothing, a
random policy presses a pair's both buttons a quarter of the time, and a policy cannot put
its probability on "left or right, never both"; a categorical per pair has exactly the three
outcomes. Sample Factory's ViZDoom action spaces group buttons the same way.

Delta buttons take a signed value per tic, measured with the engine: TURN_LEFT_RIGHT_DELTA
`+v` turns right `v` degrees a tic (a held TURN_LEFT turns 7.03 degrees a tic once at full
speed), LOOK_UP_DOWN_DELTA `+v` looks down `v` degrees a tic, MOVE_*_DELTA `v` moves at speed
`v` (a MOVE_FORWARD press is 25), negative values the other way. Their ranges
(`DELTA_RANGES`): 10 degrees a tic for turning (Sample Factory's discretised turn, 11 values
in [-10, 10]), 5 for looking, 25 (a press's speed) for moving.

The buttons an agent acts with (`buttons`) may include some that a scenario lacks (the joint
set of a multi-task run): those do nothing there; the scenario keeps its own buttons, so a
level plays the same game alone and in a multi-task run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

#: The forms of `DoomActions`, and `registered`: the id's own `max_buttons_pressed` (1:
#: single; 0: combos).
DOOM_ACTIONS = ("single", "combos", "registered")
#: The actions when `doom_actions` is unset: `single`, chosen by measurement (APPO, 800K
#: frames, 2 seeds: on Basic `combos` reached 75 on 0 seeds of 2 against 1 of 2, on
#: HealthGathering both reached 1500 on 2 of 2; docs/notes/vizdoom-actions.md).
DEFAULT_DOOM_ACTIONS = "single"
#: Groups of binary buttons of which `combos` presses at most one (each a categorical head).
EXCLUSIVE = (
    ("MOVE_FORWARD", "MOVE_BACKWARD"),
    ("MOVE_LEFT", "MOVE_RIGHT"),
    ("TURN_LEFT", "TURN_RIGHT"),
    ("LOOK_UP", "LOOK_DOWN"),
    ("MOVE_UP", "MOVE_DOWN"),
    ("SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON"),
    ("SELECT_NEXT_ITEM", "SELECT_PREV_ITEM"),
    tuple(f"SELECT_WEAPON{i}" for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 0)),
)
#: Each delta button's range: the largest value (degrees or speed a tic) either way.
DELTA_RANGES = {
    "TURN_LEFT_RIGHT_DELTA": 10.0,
    "LOOK_UP_DOWN_DELTA": 5.0,
    "MOVE_FORWARD_BACKWARD_DELTA": 25.0,
    "MOVE_LEFT_RIGHT_DELTA": 25.0,
    "MOVE_UP_DOWN_DELTA": 25.0,
}
#: The first buttons of a joint set, in the order gazelle's 7-button joint set had before
#: issue 51 (so that those runs' action indices keep their meaning); other buttons follow in
#: vizdoom's `Button` order.
LEADING = ("MOVE_FORWARD", "MOVE_BACKWARD", "MOVE_LEFT", "MOVE_RIGHT", "TURN_LEFT",
           "TURN_RIGHT", "ATTACK")  # fmt: skip
NOOP = "NOOP"


def is_delta(button: str) -> bool:
    """Whether `button` takes a signed value (`TURN_LEFT_RIGHT_DELTA`, ...)."""
    return button.endswith("_DELTA")


def _group(button: str) -> tuple[str, ...]:
    for group in EXCLUSIVE:
        if button in group:
            return group
    return (button,)


def _delta_values(button: str, bins: int) -> list[float]:
    """0 first (choice 0 of every head presses nothing), then -range ... +range."""
    values = np.linspace(-DELTA_RANGES.get(button, 10.0), DELTA_RANGES.get(button, 10.0), bins)
    return [0.0, *(float(v) for i, v in enumerate(values) if i != bins // 2)]


class DoomActions:
    """The actions of one scenario: what the agent chooses, and the engine's action vector.

    Args:
        buttons: the buttons the agent acts with (a scenario's own, or a joint set).
        game_buttons: the buttons the game has, in its order (`make_action`'s vector).
        mode: single | combos (module docstring).
        delta_bins: values of a delta button's head in `combos` (odd: 0 is one of them).

    Attributes:
        heads: `(name, choice names)` per head: one head named "" in `single`; in `combos`
            a group's buttons joined by `|` ("MOVE_LEFT|MOVE_RIGHT"), choices NOOP and each.
        space: `Discrete` (single) or `MultiDiscrete` (combos).

    Raises:
        ValueError: an unknown mode, an even or too small `delta_bins`, unknown or repeated
            buttons, or no buttons.
    """

    def __init__(
        self,
        buttons: Sequence[str],
        game_buttons: Sequence[str],
        mode: str = "single",
        delta_bins: int = 11,
    ) -> None:
        if mode not in ("single", "combos"):
            raise ValueError(f"ViZDoom actions {mode!r}; allowed: single | combos")
        if delta_bins < 3 or delta_bins % 2 == 0:
            raise ValueError(f"delta_bins {delta_bins}: an odd number >= 3 (0 in the middle)")
        buttons = tuple(buttons)
        if not buttons or len(set(buttons)) != len(buttons):
            raise ValueError(f"ViZDoom buttons: at least one, none twice; got {buttons}")
        choices: list[tuple[str, list[tuple[str, dict[str, float]]]]] = []
        if mode == "single":
            options: list[tuple[str, dict[str, float]]] = [(NOOP, {})]
            for b in buttons:
                if is_delta(b):
                    top = DELTA_RANGES.get(b, 10.0)
                    options += [(f"{b}={-top:g}", {b: -top}), (f"{b}={top:g}", {b: top})]
                else:
                    options.append((b, {b: 1.0}))
            choices.append(("", options))
        else:
            seen: set[str] = set()
            for b in buttons:
                if b in seen:
                    continue
                if is_delta(b):
                    seen.add(b)
                    values = _delta_values(b, delta_bins)
                    choices.append((b, [(f"{v:g}", {b: v}) for v in values]))
                    continue
                members = [m for m in _group(b) if m in buttons]
                seen.update(members)
                if len(members) == 1:
                    choices.append((b, [(NOOP, {}), (b, {b: 1.0})]))
                else:
                    name = "|".join(members)
                    choices.append((name, [(NOOP, {}), *((m, {m: 1.0}) for m in members)]))
        index = {b: i for i, b in enumerate(game_buttons)}
        rows = [
            [sum(v for b, v in press.items() if index.get(b) == col) for col in range(len(index))]
            for _, options in choices
            for _, press in options
        ]
        self.mode, self.buttons, self.game_buttons = mode, buttons, tuple(game_buttons)
        self.heads = tuple((name, tuple(n for n, _ in options)) for name, options in choices)
        sizes = [len(options) for _, options in choices]
        # why: a button the game lacks has no column: pressing it does nothing there.
        self._table = np.asarray(rows, np.float64).reshape(sum(sizes), len(index))
        self._offsets = np.cumsum([0, *sizes[:-1]])
        self._rows = [list(row) for row in self._table]
        self.space: spaces.Space[Any] = (
            spaces.Discrete(sizes[0]) if mode == "single" else spaces.MultiDiscrete(sizes)
        )

    @property
    def meanings(self) -> list[str]:
        """`single`: each action's name (NOOP, MOVE_LEFT, ...); `combos`: each head as
        `name: choice|choice|...`."""
        if self.mode == "single":
            return list(self.heads[0][1])
        return [f"{name}: {'|'.join(options)}" for name, options in self.heads]

    def __call__(self, action: Any) -> list[float]:
        """The engine's action vector (`game_buttons` order) of one agent action."""
        if self.mode == "single":
            return self._rows[int(action)]
        picked = self._offsets + np.asarray(action, np.int64).reshape(-1)
        return self._table[picked].sum(axis=0).tolist()


def union_buttons(button_sets: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Every button of any of the sets, once, in a fixed order (`LEADING` first, then
    vizdoom's `Button` order), whatever the sets' order."""
    import vizdoom

    found = {b for buttons in button_sets for b in buttons}
    order = [*LEADING, *(b for b in vizdoom.Button.__members__ if b not in LEADING)]
    unknown = found.difference(order)
    if unknown:
        raise ValueError(f"unknown ViZDoom buttons {sorted(unknown)}")
    return tuple(b for b in order if b in found)


@functools.lru_cache(maxsize=256)
def config_buttons(config: str, settings: tuple[tuple[str, Any], ...] = ()) -> tuple[str, ...]:
    """The buttons a scenario's `.cfg` (and registered settings) give the game, in order."""
    import vizdoom

    game = vizdoom.DoomGame()
    game.load_config(config)
    if settings:
        game.set_config(dict(settings))
    return tuple(b.name for b in game.get_available_buttons())


def actions_mode(doom_actions: str | None, max_buttons_pressed: int) -> str:
    """single | combos for `doom_actions` (unset: `DEFAULT_DOOM_ACTIONS`) of an id that
    registers `max_buttons_pressed` (`registered`: 1 single, else combos: the heads press
    any combination, they cannot cap how many).

    Raises:
        ValueError: an unknown `doom_actions`.
    """
    mode = DEFAULT_DOOM_ACTIONS if doom_actions is None else doom_actions
    if mode not in DOOM_ACTIONS:
        raise ValueError(f"doom_actions {mode!r}; allowed: {' | '.join(DOOM_ACTIONS)}")
    if mode == "registered":
        return "single" if max_buttons_pressed == 1 else "combos"
    return mode
