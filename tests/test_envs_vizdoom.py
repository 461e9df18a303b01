"""ViZDoom as a family (`gazelle.envs.vizdoom`) and through the generic dict path: real
scenarios, headless (skipped where `vizdoom`, the `.[doom]` extra, is not installed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("vizdoom")

from gazelle.algorithms.common import probe
from gazelle.config import Config, ConfigError
from gazelle.envs import default_action_repeats, expand_levels, make, obs_spec
from gazelle.envs.batch import SerialEnvs
from gazelle.envs.vizdoom import DOOM6, FULL_BUTTONS
from gazelle.types import IMAGE, VECTOR

BASIC = "VizdoomBasic-v1"


def test_an_id_without_a_module_prefix_is_the_doom_family():
    env = make(BASIC, seed=0)
    spec = obs_spec(env)
    assert spec.names == ("frame", "gamevariables")
    assert spec.field("frame").shape == (3, 72, 96) and spec.field("gamevariables").shape == (3,)
    assert env.unwrapped.action_meanings == ["NOOP", "MOVE_LEFT", "MOVE_RIGHT", "ATTACK"]
    assert default_action_repeats(BASIC) == 4
    obs, _ = env.reset()
    assert obs["frame"].dtype == np.uint8 and obs["frame"].max() > 0
    assert obs["gamevariables"].tolist() == pytest.approx([1.0, 0.0, 50 / 50], abs=0.2)
    env.close()


def test_an_episode_ends_with_its_statistics():
    """Basic: shooting at once often kills the monster (terminated); doing nothing runs
    into the 300-tic timeout (truncated). Either way the game's totals come with it."""
    env = make(BASIC, seed=1)
    env.reset()
    steps, truncated, info = 0, False, {}
    while True:
        _, _, terminated, truncated, info = env.step(0)
        steps += 1
        if terminated or truncated:
            break
    assert truncated and not terminated and steps == 75  # 300 tics at 4 per step
    stats = info["episode_stats"]
    assert set(stats) >= {"kills", "health", "ammo", "items", "damage_taken", "died"}
    assert stats["kills"] == 0 and stats["health"] == 100 and info["game_over"]
    env.close()


def test_the_batch_reports_the_statistics_of_ended_games():
    with SerialEnvs([lambda: make(BASIC, seed=2)], seeds=[2]) as envs:
        envs.reset()
        for _ in range(75):
            step = envs.step(np.zeros(1, np.int64))
        assert step.game_over[0] and step.episode_stats[0]["health"] == 100


def test_the_full_action_space_is_the_same_in_every_scenario():
    a = make(BASIC, full_action_space=True)
    b = make("VizdoomHealthGathering-v1", full_action_space=True)
    names = ["NOOP", *FULL_BUTTONS]
    assert a.unwrapped.action_meanings == names == b.unwrapped.action_meanings
    assert obs_spec(a) == obs_spec(b)
    a.close()
    b.close()


def test_a_multi_task_doom_spec_gets_one_joint_action_set():
    """Scenarios with other buttons: unset --full-action-space gives every level the full
    set (the union of the scenarios' buttons); --no-full-action-space refuses them."""
    config = Config.of(env="VizdoomBasic-v1,VizdoomDefendCenter-v1")
    found = probe(config)
    assert found.full_action_space and found.obs_spec.num_actions == 1 + len(FULL_BUTTONS)
    with pytest.raises(ConfigError, match=r"MOVE_LEFT.*TURN_LEFT.*--full-action-space"):
        probe(config.replace(full_action_space=False))


def test_doom6_names_six_scenarios():
    assert expand_levels("doom6") == list(DOOM6) and len(DOOM6) == 6


def test_doom_through_the_generic_dict_path(tmp_path):
    """vizdoom's own Gymnasium env (screen + game variables) through the generic adapter."""
    ini = str(tmp_path / "_vizdoom.ini")  # why: else the engine writes it into the cwd
    env = make(BASIC, preset="raw", seed=0, screen_resolution="RES_160X120", doom_config_path=ini)
    spec = obs_spec(env)
    kinds = {f.name: (f.kind, f.shape) for f in spec.fields}
    assert kinds == {"gamevariables": (VECTOR, (1,)), "screen": (IMAGE, (3, 120, 160))}
    obs, _ = env.reset()
    assert obs["screen"].shape == (3, 120, 160) and obs["gamevariables"].dtype == np.float32
    _, _, _, _, _ = env.step(3)
    env.close()


@pytest.mark.slow
def test_a_doom_run_trains_logs_its_statistics_and_is_tested_with_video(tmp_path):
    """A short run end to end: training with the family's preset, the episode statistics
    in the progress rows, then test mode with a GIF."""
    from gazelle.algorithms import train
    from gazelle.evaluate import evaluate

    config = Config.of(
        env=BASIC, logdir=str(tmp_path), total_frames=6_000, num_actors=1, envs_per_actor=4,
        batch_size=2, unroll_length=16, log_interval_s=1.0, quiet=True,
    )  # fmt: skip
    train(config)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last[f"episodes/{BASIC}"] >= 4  # 6,000 frames are 1,500 steps: 20 games or more
    assert f"episode_kills/{BASIC}" in last and f"episode_health/{BASIC}" in last
    results = evaluate(tmp_path, episodes=2, verbose=False, video=1)
    level = results["levels"][BASIC]
    assert len(level["returns"]) == 2 and level["videos"]
    assert (tmp_path / level["videos"][0]).stat().st_size > 0
