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
from gazelle.envs.vizdoom import DOOM6, family_buttons
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
    """Made alone with `full_action_space`, a scenario acts with every button of every
    scenario vizdoom registers (22: Deathmatch's 20, USE, SELECT_WEAPON7)."""
    a = make(BASIC, full_action_space=True, doom_actions="single")
    b = make("VizdoomHealthGathering-v1", full_action_space=True, doom_actions="single")
    deltas = [x for x in family_buttons() if x.endswith("_DELTA")]
    assert len(family_buttons()) == 22 and len(deltas) == 3
    names = ["NOOP", *(x for x in family_buttons() if x not in deltas)]
    assert a.unwrapped.action_meanings[: len(names)] == names
    assert len(a.unwrapped.action_meanings) == 1 + 19 + 2 * 3  # each delta both ways
    assert a.unwrapped.action_meanings == b.unwrapped.action_meanings
    assert obs_spec(a) == obs_spec(b)
    a.close()
    b.close()


def test_a_multi_task_doom_spec_gets_one_joint_action_set():
    """Scenarios with other buttons: unset --full-action-space gives every level the joint
    set (the union of the levels' buttons); --no-full-action-space refuses them."""
    config = Config.of(env="VizdoomBasic-v1,VizdoomDefendCenter-v1", doom_actions="single")
    found = probe(config)
    assert found.full_action_space and found.obs_spec.num_actions == 1 + 5  # L, R, TL, TR, A
    combos = probe(config.replace(doom_actions="combos")).obs_spec.actions
    assert [c.size for c in combos.components] == [3, 3, 2]  # move, turn, attack
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


def test_screen_and_game_variables_reach_the_agent():
    """The real actor on the real engine: the unroll carries the screen and the game
    variables, the loss's gradient reaches both encoders, and the policy reads the game
    variables (another health gives other logits)."""
    import torch
    import torch.multiprocessing as mp

    from gazelle.algorithms.impala.loss import LossSettings, impala_loss
    from gazelle.backends.local.buffers import SlotLayout
    from gazelle.backends.local.params import ParamStore
    from gazelle.backends.ray.hosts import ArrayWriter
    from gazelle.models import Agent
    from gazelle.runtime.actor import Actor, ActorSpec
    from gazelle.runtime.policy import LocalPolicy

    torch.manual_seed(0)
    probe = make(BASIC)
    spec = obs_spec(probe)
    probe.close()  # why: its engine's settings folder is removed on close
    agent = Agent(spec, torso="shallow")

    params = ParamStore(agent, mp.get_context("spawn"))
    params.publish(agent, 0)
    writer = ArrayWriter(SlotLayout(6, spec, 256), 2)
    actor_spec = ActorSpec(
        actor_id=0, level=BASIC, level_id=0, envs_per_actor=2, unroll_length=6,
        obs_spec=spec, torso="shallow", use_lstm=True, seed=5,
    )  # fmt: skip
    actor = Actor(actor_spec, writer, LocalPolicy(Agent(spec, torso="shallow"), params, 2))
    actor.unroll([0, 1])
    actor.close()
    batch = dict(writer.data)
    assert batch["frame"].shape == (7, 2, 3, 72, 96) and batch["frame"].float().std() > 10
    health, _, ammo = batch["gamevariables"][1, 0].tolist()
    assert health == pytest.approx(1.0) and 0.9 <= ammo <= 1.0  # 100 health, 46-50 ammo
    loss, _ = impala_loss(agent, batch, LossSettings(0.99, 0.5, 0.01, "abs_one"))
    loss.backward()
    for key in ("frame", "gamevariables"):
        grads = [p.grad for p in agent._encoder(key).parameters()]
        assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0
    obs = {k: v[1] for k, v in batch.items() if k in spec.names}
    inputs = (torch.zeros(2, dtype=torch.long), torch.zeros(2), torch.ones(2, dtype=torch.bool))
    with torch.no_grad():
        out, _ = agent.act(obs, *inputs, agent.initial_state(2))
        hurt, _ = agent.act({**obs, "gamevariables": obs["gamevariables"] * 0.1}, *inputs,
                            agent.initial_state(2))  # fmt: skip
    assert not torch.allclose(out.policy_logits, hurt.policy_logits)


def test_gazelle_bench_env_runs_a_doom_id():
    from gazelle.bench import env as bench_env

    result = bench_env.run(BASIC, seconds=0.2, num_envs=2)
    assert result["action_repeats"] == 4
    for case in ("single", "batch"):
        steps, frames = result[f"{case}_steps_per_s"], result[f"{case}_frames_per_s"]
        assert steps > 10 and frames == pytest.approx(4 * steps, abs=1.0)


def test_gif_frames_are_the_rendered_colour_screen():
    from gazelle.video import EpisodeRecorder

    env = make(BASIC, seed=0, render_mode="rgb_array")
    recorder = EpisodeRecorder(env, episodes=1)
    env.reset(seed=0)
    recorder.frame(0)
    env.step(1)
    recorder.frame(0)
    env.close()
    first, second = recorder.clips[0]
    assert first.shape == second.shape == (120, 160, 3) and first.dtype == np.uint8
    assert first.std() > 10 and not np.array_equal(first, second)  # the screen, moving


def test_the_joint_action_set_presses_the_same_button_in_every_scenario():
    """Index i is one button in every scenario: ATTACK spends a bullet in Basic and in
    DefendCenter (whose own set puts ATTACK elsewhere), MOVE_LEFT spends none."""
    attack, left = 1 + family_buttons().index("ATTACK"), 1 + family_buttons().index("MOVE_LEFT")
    for level in (BASIC, "VizdoomDefendCenter-v1"):
        env = make(level, seed=0, full_action_space=True, doom_actions="single")
        ammo = env.reset(seed=0)[0]["gamevariables"][2]
        after_left = env.step(left)[0]["gamevariables"][2]
        for _ in range(4):  # why: the pistol's refire takes longer than one action
            after_attack = env.step(attack)[0]["gamevariables"][2]
        env.close()
        assert after_left == ammo and after_attack < ammo, level


MULTI = "VizdoomBasic-v1,VizdoomPredictPosition-v1"  # 300-tic scenarios, other buttons


def test_a_command_that_names_no_algorithm_trains_doom_with_appo():
    """`--algo` unset: APPO when every level is a ViZDoom scenario (IMPALA's loss did not
    learn Basic, docs/results.md), IMPALA for any other spec; a given --algo wins."""
    from gazelle.cli import build_parser, config_from_args

    def algo_of(*argv: str) -> str:
        return config_from_args(build_parser().parse_args(["train", *argv])).algo

    assert algo_of("--env", BASIC) == "appo"
    assert algo_of("--env", "doom6") == "appo"
    assert algo_of("--env", MULTI) == "appo"
    assert algo_of("--env", f"{BASIC},CartPole-v1") == "impala"
    assert algo_of("--env", "CartPole-v1") == "impala"
    assert algo_of() == "impala"
    assert algo_of("--env", BASIC, "--algo", "impala") == "impala"
    assert algo_of("--env", BASIC, "--algo", "a3c") == "a3c"
    # why: the paper's preset is IMPALA's: APPO over it would be neither (issue 21).
    assert algo_of("--env", BASIC, "--preset", "impala-paper") == "impala"


def test_the_python_api_given_settings_without_an_algorithm_trains_doom_with_appo(tmp_path):
    """`gazelle.train({...})` chooses as the command does; a `Config` keeps its algo."""
    import gazelle

    settings = dict(env=BASIC, total_frames=1_000, num_actors=1, envs_per_actor=2,
                    batch_size=2, unroll_length=8, quiet=True)  # fmt: skip
    result = gazelle.train(settings, logdir=str(tmp_path / "mapping"))
    assert json.loads((result.logdir / "config.json").read_text())["algo"] == "appo"
    assert Config.of(**settings).algo == "impala"


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory):
    """A short multi-task run of two scenarios with different buttons (its logdir)."""
    from gazelle.algorithms import train

    logdir = tmp_path_factory.mktemp("multi")
    config = Config.of(
        env=MULTI, logdir=str(logdir), total_frames=6_000, num_actors=2, envs_per_actor=2,
        batch_size=2, unroll_length=16, log_interval_s=1.0, quiet=True,
    )  # fmt: skip
    train(config)
    return logdir


@pytest.mark.slow
def test_a_multi_task_doom_run_logs_each_level_and_is_tested_per_level_with_video(multi_run):
    """Two scenarios with different buttons train one agent (the joint action set): the
    progress rows count each level's games, their returns and statistics and one summary
    score; test mode plays each level, with a GIF, and gives the same summary."""
    from gazelle.evaluation import evaluate

    tmp_path = multi_run
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    last = rows[-1]
    levels = MULTI.split(",")
    for level in levels:
        assert last[f"episodes/{level}"] >= 2  # 3,000 frames a level: 750 steps, 75 a game
        assert last[f"episode_return/{level}"] is not None
        assert f"episode_kills/{level}" in last and f"episode_health/{level}" in last
    summaries = [r["scores/mean_level_return"] for r in rows if "scores/mean_level_return" in r]
    assert summaries, "no row has the summary score"
    results = evaluate(tmp_path, episodes=2, verbose=False, video=1)
    assert list(results["levels"]) == levels
    for level in levels:
        assert len(results["levels"][level]["returns"]) == 2
        (gif,) = results["levels"][level]["videos"]
        assert (tmp_path / gif).stat().st_size > 0
    means = [results["levels"][level]["mean_return"] for level in levels]
    assert results["mean_level_return"] == pytest.approx(np.mean(means))


@pytest.mark.slow
def test_the_doom_presets_popart_keeps_a_value_and_statistics_per_scenario(multi_run):
    """Multi-task PopArt (the ViZDoom preset has it on): one value output and one mu/sigma per
    level, each moved by its own level's returns only: Basic's (tens to hundreds below 0,
    -1 a tic) and PredictPosition's (0 to 1) stay apart."""
    from gazelle import checkpoint

    agent = checkpoint.load(multi_run / "checkpoint.pt")["agent"]
    assert agent["baseline.weight"].shape[0] == 2
    count, mu = agent["baseline.count"], agent["baseline.mu"]
    assert (count > 0).all(), count
    assert mu[0] < -10.0 and abs(mu[1]) < 2.0, mu


def _engines_under(pid: int) -> list[int]:
    """The ViZDoom engine processes among `pid`'s children."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"vizdoom" in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_test_run_stopped_with_sigterm_closes_its_engine(multi_run):
    """`gazelle test` stopped by SIGTERM exits 130 and closes its env: the engine, a process
    of its own that outlives a killed parent, is gone too (it used to be left running)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "gazelle.cli", "test", "--logdir", str(multi_run), "--episodes",
         "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        engines: list[int] = []
        while not engines and time.monotonic() < deadline and proc.poll() is None:
            engines = _engines_under(proc.pid)
            time.sleep(0.2)
        assert engines, proc.poll()
        time.sleep(1.0)  # playing now
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "stopped; no results written" in err
    time.sleep(0.5)
    from procfs import running

    alive = [pid for pid in engines if running(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the engine outlived gazelle test"
