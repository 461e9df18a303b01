"""ViZDoom's buttons as actions (`gazelle.envs.doom_actions`): heads per button group,
delta buttons with both signs, the engine's action vector; no engine runs here (the real
engine's tests are in tests/test_envs_vizdoom_actions.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from gazelle.envs.action_spaces import action_spec_of
from gazelle.envs.doom_actions import DoomActions, union_buttons

DEATHMATCH = (
    "ATTACK", "SPEED", "STRAFE", "MOVE_RIGHT", "MOVE_LEFT", "MOVE_BACKWARD", "MOVE_FORWARD",
    "TURN_RIGHT", "TURN_LEFT", "SELECT_WEAPON1", "SELECT_WEAPON2", "SELECT_WEAPON3",
    "SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON", "LOOK_UP_DOWN_DELTA", "TURN_LEFT_RIGHT_DELTA",
)  # fmt: skip


def test_combos_make_one_head_per_group_of_exclusive_buttons():
    actions = DoomActions(DEATHMATCH, DEATHMATCH, "combos")
    heads = dict(actions.heads)
    assert list(heads) == [
        "ATTACK", "SPEED", "STRAFE", "MOVE_LEFT|MOVE_RIGHT", "MOVE_FORWARD|MOVE_BACKWARD",
        "TURN_LEFT|TURN_RIGHT", "SELECT_WEAPON1|SELECT_WEAPON2|SELECT_WEAPON3",
        "SELECT_NEXT_WEAPON|SELECT_PREV_WEAPON", "LOOK_UP_DOWN_DELTA", "TURN_LEFT_RIGHT_DELTA",
    ]  # fmt: skip
    assert heads["MOVE_LEFT|MOVE_RIGHT"] == ("NOOP", "MOVE_LEFT", "MOVE_RIGHT")
    assert heads["ATTACK"] == ("NOOP", "ATTACK")
    assert len(heads["TURN_LEFT_RIGHT_DELTA"]) == 11
    assert actions.space == spaces.MultiDiscrete([2, 2, 2, 3, 3, 3, 4, 3, 11, 11])
    spec = action_spec_of(actions.space)  # what the agent gets: a categorical per head
    assert [(c.kind, c.size) for c in spec.components] == [
        ("categorical", n) for n in (2, 2, 2, 3, 3, 3, 4, 3, 11, 11)
    ]


def test_a_combination_presses_each_chosen_button_in_the_games_order():
    game = ("MOVE_LEFT", "MOVE_RIGHT", "ATTACK", "TURN_LEFT", "TURN_RIGHT")
    actions = DoomActions(game, game, "combos")
    assert [name for name, _ in actions.heads] == ["MOVE_LEFT|MOVE_RIGHT", "ATTACK",
                                                   "TURN_LEFT|TURN_RIGHT"]  # fmt: skip
    assert actions([0, 0, 0]) == [0, 0, 0, 0, 0]  # choice 0 of every head: nothing
    assert actions([2, 1, 1]) == [0, 1, 1, 1, 0]  # right, attack and turn left at once
    assert actions(np.array([1, 0, 2])) == [1, 0, 0, 0, 1]


def test_single_presses_one_button_at_a_time_as_before():
    game = ("MOVE_LEFT", "MOVE_RIGHT", "ATTACK")
    actions = DoomActions(game, game, "single")
    assert actions.space == spaces.Discrete(4)
    assert actions.meanings == ["NOOP", "MOVE_LEFT", "MOVE_RIGHT", "ATTACK"]
    rows = [actions(i) for i in range(4)]
    assert rows == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]


@pytest.mark.parametrize("mode", ["single", "combos"])
def test_delta_buttons_take_both_signs(mode):
    """A delta button is a signed value (degrees or speed a tic): both directions are
    actions (it used to be one fixed press of +1)."""
    game = ("ATTACK", "TURN_LEFT_RIGHT_DELTA", "MOVE_FORWARD_BACKWARD_DELTA")
    actions = DoomActions(game, game, mode)
    n = actions.space.n if mode == "single" else actions.space.nvec[1]
    if mode == "single":
        turns = sorted(actions(i)[1] for i in range(n))
        moves = sorted(actions(i)[2] for i in range(n))
    else:
        turns = sorted(actions([0, i, 0])[1] for i in range(n))
        moves = sorted(actions([0, 0, i])[2] for i in range(actions.space.nvec[2]))
    assert turns[0] == -10.0 and turns[-1] == 10.0 and 0.0 in turns
    assert moves[0] == -25.0 and moves[-1] == 25.0
    if mode == "combos":
        assert turns == [-10, -8, -6, -4, -2, 0, 2, 4, 6, 8, 10]
        assert actions.heads[1][1][0] == "0"  # choice 0 turns by nothing


def test_a_button_the_game_lacks_does_nothing():
    """A joint set's button missing from a scenario has no column in its action vector."""
    joint = ("MOVE_LEFT", "MOVE_RIGHT", "TURN_LEFT", "TURN_RIGHT", "ATTACK")
    basic = ("MOVE_LEFT", "MOVE_RIGHT", "ATTACK")
    single = DoomActions(joint, basic, "single")
    assert single.meanings == ["NOOP", *joint]
    assert single(3) == [0, 0, 0] and single(1) == [1, 0, 0] and single(5) == [0, 0, 1]
    combos = DoomActions(joint, basic, "combos")
    assert combos([1, 2, 1]) == [1, 0, 1]  # the turn is dropped, the rest pressed


def test_the_union_of_button_sets_has_one_order_whatever_the_sets_order():
    basic, center = ("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"), ("TURN_LEFT", "TURN_RIGHT", "ATTACK")
    joint = union_buttons([basic, center])
    assert joint == union_buttons([center, basic])
    assert joint == ("MOVE_LEFT", "MOVE_RIGHT", "TURN_LEFT", "TURN_RIGHT", "ATTACK")
    assert set(union_buttons([DEATHMATCH, basic])) == set(DEATHMATCH)
    with pytest.raises(ValueError, match="FIRE"):
        union_buttons([("FIRE",)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "both"}, "single | combos"),
        ({"delta_bins": 4}, "odd"),
        ({"buttons": ("ATTACK", "ATTACK")}, "none twice"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, message):
    settings = {"buttons": ("ATTACK",), "game_buttons": ("ATTACK",), **kwargs}
    with pytest.raises(ValueError, match=message):
        DoomActions(**settings)
