"""ViZDoom's actions on the real engine (issue 51): buttons pressed together, delta buttons
both ways, the registered id's map, skill and max_buttons_pressed, the full action space as
the union of the levels' buttons, raw ids with different buttons (skipped where `vizdoom`,
the `.[doom]` extra, is not installed). The engine starts in ~0.5 s; a DoomEnv made and not
reset starts none."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("vizdoom")

import vizdoom as vzd

from gazelle.algorithms.common import env_kwargs, prepare, probe
from gazelle.algorithms.runstate import saved_config
from gazelle.config import Config, ConfigError
from gazelle.envs import make, obs_spec
from gazelle.envs.batch import SerialEnvs
from gazelle.envs.vizdoom import DEFAULT_DOOM_ACTIONS, scenario_buttons

BASIC = "VizdoomBasic-v1"
DEATHMATCH = "VizdoomDeathmatch-v1"


def variable(env, name: str) -> float:
    return float(env.unwrapped._game.get_game_variable(getattr(vzd.GameVariable, name)))


def test_combos_give_basic_two_heads_and_a_combination_reaches_the_game():
    """Basic with `combos`: a categorical over none/MOVE_LEFT/MOVE_RIGHT and one over
    none/ATTACK; one step of the env batch (the actors' path: a stored flat action to the
    env's native one) moves left and fires at once."""
    env = make(BASIC, doom_actions="combos", seed=0)
    spec = obs_spec(env).actions
    assert [(c.kind, c.size) for c in spec.components] == [("categorical", 3), ("categorical", 2)]
    move = ("MOVE_LEFT|MOVE_RIGHT", ("NOOP", "MOVE_LEFT", "MOVE_RIGHT"))
    assert env.unwrapped.action_heads == (move, ("ATTACK", ("NOOP", "ATTACK")))
    env.close()
    made = []

    def one() -> object:
        made.append(make(BASIC, doom_actions="combos", seed=0))
        return made[-1]

    with SerialEnvs([one], seeds=[0]) as envs:
        first = envs.reset()
        env = made[0]
        y, ammo = variable(env, "POSITION_Y"), first["gamevariables"][0, 2]
        for _ in range(4):  # why: the pistol's refire takes longer than one action
            step = envs.step(np.array([[1, 1]]))  # MOVE_LEFT and ATTACK
            assert env.unwrapped._game.get_last_action() == [1.0, 0.0, 1.0]
        assert variable(env, "POSITION_Y") > y + 10  # moved left ...
        assert step.obs["gamevariables"][0, 2] < ammo  # ... and fired, in the same steps


def test_delta_buttons_turn_both_ways_in_the_game():
    """Deathmatch's TURN_LEFT_RIGHT_DELTA is a head of 11 turns, 0 first, then -10 ... +10
    degrees a tic: the most negative turns left by 40 degrees a step (4 tics), the most
    positive right by as much (the button used to be one press of +1: right only)."""
    env = make(DEATHMATCH, doom_actions="combos", seed=0)
    names = [name for name, _ in env.unwrapped.action_heads]
    turn = names.index("TURN_LEFT_RIGHT_DELTA")
    assert env.unwrapped.action_heads[turn][1] == ("0", "-10", "-8", "-6", "-4", "-2", "2",
                                                   "4", "6", "8", "10")  # fmt: skip
    env.reset(seed=0)
    nothing = np.zeros(len(names), np.int64)
    for _ in range(3):  # why: the first tics of a deathmatch ignore the player's input
        env.step(nothing)
    turned = []
    for choice in (1, 10, 0):
        before = variable(env, "ANGLE")
        env.step(np.where(np.arange(len(names)) == turn, choice, 0))
        turned.append((variable(env, "ANGLE") - before + 180.0) % 360.0 - 180.0)
    env.close()
    assert turned == pytest.approx([40.0, -40.0, 0.0], abs=0.1)


def test_a_registered_map_id_plays_its_own_map_and_skill():
    """`VizdoomFreedoom1E1M5-S3-v0` registers doom_map E1M5 and doom_skill 3 (it used to
    play map01); the engine plays them, and E1M5 starts elsewhere than E1M1."""
    starts = {}
    for env_id, level, skill in (("VizdoomFreedoom1E1M5-S3-v0", "e1m5", 3),
                                 ("VizdoomFreedoom1E1M1-S1-v0", "e1m1", 1)):  # fmt: skip
        env = make(env_id, seed=0)
        env.reset(seed=0)
        game = env.unwrapped._game
        assert (game.get_doom_map().lower(), game.get_doom_skill()) == (level, skill)
        starts[level] = (variable(env, "POSITION_X"), variable(env, "POSITION_Y"))
        env.close()
    assert starts["e1m5"] != starts["e1m1"]


def test_doom_actions_registered_follows_the_ids_max_buttons_pressed():
    """The plain `-v1` ids register max_buttons_pressed=1 (one button at a time), the
    `-MultiBinary-v1` and map ids 0 (any combination): `registered` honours each (the
    MultiBinary ids used to act like the plain ones)."""
    plain = make(BASIC, doom_actions="registered")
    multi = make("VizdoomBasic-MultiBinary-v1", doom_actions="registered")
    assert plain.action_space.n == 4 and plain.unwrapped.action_meanings[0] == "NOOP"
    assert list(multi.action_space.nvec) == [3, 2]
    freedoom = make("VizdoomFreedoom1E1M5-S3-v0", doom_actions="registered")
    assert len(freedoom.action_space.nvec) > 1
    for env in (plain, multi, freedoom):
        env.close()


def test_the_full_action_space_is_the_union_of_the_levels_buttons():
    """Basic with Deathmatch: the joint set is all 20 of Deathmatch's buttons (it used to be
    7, Deathmatch losing 13), handed to the actors too; Basic keeps its own game: a button it
    lacks (TURN_LEFT) does nothing there, MOVE_LEFT moves."""
    config = Config.of(env=f"{BASIC},{DEATHMATCH}", doom_actions="single")
    found = probe(config)
    joint = env_kwargs(config.replace(full_action_space=True))["buttons"]
    assert found.full_action_space and set(joint) == set(scenario_buttons(DEATHMATCH))
    assert len(joint) == 20 and found.obs_spec.num_actions == 1 + 17 + 2 * 3  # 3 deltas
    env = make(BASIC, buttons=joint, doom_actions="single", seed=0)
    meanings = env.unwrapped.action_meanings
    env.reset(seed=0)
    angle, y = variable(env, "ANGLE"), variable(env, "POSITION_Y")
    env.step(meanings.index("TURN_LEFT"))
    assert env.unwrapped._game.get_last_action() == [0.0, 0.0, 0.0]
    assert variable(env, "ANGLE") == angle
    env.step(meanings.index("MOVE_LEFT"))
    env.step(meanings.index("MOVE_LEFT"))
    assert variable(env, "POSITION_Y") > y
    env.close()


def test_raw_ids_with_different_buttons_get_the_joint_buttons():
    """`--raw-obs` with Basic and TakeCover (MOVE_LEFT, MOVE_RIGHT only): vizdoom's own
    envs made with the union as their buttons (it failed, saying full_action_space applies
    to Atari and ViZDoom)."""
    config = Config.of(env=f"{BASIC},VizdoomTakeCover-v1", raw_obs=True)
    found = probe(config)
    assert found.full_action_space and found.obs_spec.num_actions == 4  # vizdoom's Discrete
    env = make("VizdoomTakeCover-v1", preset="raw", buttons=("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"))
    game = env.unwrapped.game
    assert env.action_space.n == 4 and vzd.Button.ATTACK in game.get_available_buttons()
    env.close()


def test_the_doom_actions_flag_is_checked_and_saved_resolved(tmp_path):
    """A bad value names what is allowed; a non-ViZDoom env refuses the flag; unset, the run
    saves the default it played; an older ViZDoom run's config reads as `single`."""
    with pytest.raises(ConfigError, match=r"single \| combos \| registered"):
        prepare(Config.of(env=BASIC, doom_actions="all", logdir=str(tmp_path / "a")))
    with pytest.raises(ConfigError, match="doom_actions applies to ViZDoom ids only"):
        prepare(Config.of(env="CartPole-v1", doom_actions="combos", logdir=str(tmp_path / "b")))
    config, _, _ = prepare(Config.of(env=BASIC, num_actors=1, logdir=str(tmp_path / "c")))
    assert config.env.doom_actions == DEFAULT_DOOM_ACTIONS
    old = json.loads(json.dumps(config.to_dict()))
    del old["env"]["doom_actions"]
    assert saved_config(old).env.doom_actions == "single"
