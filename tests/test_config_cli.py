"""Config validation and the CLI's handling of bad input: one clear line, no traceback."""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gazelle.cli import build_parser, config_from_args, field_docs, main
from gazelle.config import Config, ConfigError, all_fields, resolve, validate
from gazelle.envs.probe import EnvProbe
from gazelle.types import ObsSpec


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path, monkeypatch):
    """A command refused after its logdir's check has made the default fresh folder
    (`runs/<env>-<time>`) there, not in the repository."""
    monkeypatch.chdir(tmp_path)


# What `gazelle.envs.probe` finds, for the presets (which read nothing else of the env).
VECTOR = EnvProbe(["CartPole-v1"], ObsSpec((4,), np.dtype(np.float32), 2), 1, "gym")
ATARI = EnvProbe(["ALE/Pong-v5"], ObsSpec((4, 84, 84), np.dtype(np.uint8), 6), 4, "atari")
DMLAB = EnvProbe(["dmlab:rooms_watermaze"], ObsSpec((3, 72, 96), np.dtype(np.uint8), 9), 4, "dmlab")


def test_defaults_validate_and_resolve_from_presets():
    config = resolve(validate(Config()), VECTOR)
    assert config.model.torso == "mlp"
    impala = config.impala
    assert impala.batch_size and impala.unroll_length and impala.learning_rate
    atari = resolve(Config.of(env="ALE/Pong-v5"), ATARI)
    # the deep ResNet on a GPU, the shallow torso on a CPU (7x faster there)
    assert atari.model.torso == "shallow"
    assert resolve(Config.of(env="ALE/Pong-v5"), ATARI, cuda=True).model.torso == "deep"
    # gazelle's Atari preset: what learned Pong here (docs/results.md)
    assert (atari.impala.unroll_length, atari.impala.batch_size) == (20, 8)
    assert (atari.impala.optimizer, atari.impala.learning_rate) == ("adam", 0.0006)
    assert atari.model.use_lstm is False and atari.run.total_frames == 50_000_000
    assert atari.impala.entropy_cost == 0.003
    # vector tasks: no core (with it CartPole's curve collapsed again and again, docs/results.md)
    assert config.model.use_lstm is False
    assert resolve(Config.of(use_lstm=True), VECTOR).model.use_lstm is True
    dmlab = resolve(Config.of(env="dmlab30", preset="impala-paper"), DMLAB)
    # the IMPALA seed's defaults
    assert (dmlab.get("batch_size"), dmlab.get("unroll_length")) == (2, 100)
    assert (dmlab.get("learning_rate"), dmlab.get("entropy_cost")) == (0.00048, 0.00025)
    assert (dmlab.get("epsilon"), dmlab.get("optimizer")) == (0.1, "rmsprop_tf")


def test_impala_paper_preset_is_the_papers_atari_table():
    paper = resolve(Config.of(env="ALE/Pong-v5", preset="impala-paper"), ATARI)
    got = {k: paper.get(k) for k in ("optimizer", "learning_rate", "epsilon", "entropy_cost")}
    assert got == {
        "optimizer": "rmsprop_tf",
        "learning_rate": 0.0006,
        "epsilon": 0.01,
        "entropy_cost": 0.01,
    }
    assert (paper.get("batch_size"), paper.get("unroll_length")) == (32, 20)
    assert paper.get("use_lstm") is True
    assert (paper.get("decay"), paper.get("grad_norm_clip"), paper.get("baseline_cost")) == (
        0.99,
        40.0,
        0.5,
    )


def test_explicit_values_beat_the_preset():
    config = resolve(Config.of(env="ALE/Pong-v5", batch_size=8, model="nature"), ATARI)
    assert config.impala.batch_size == 8 and config.model.torso == "nature"


def test_sections_flat_names_and_round_trip():
    config = Config.of(env="ALE/Pong-v5", model="shallow", batch_size=8, num_actors=3, seed=7)
    assert config.env.id == "ALE/Pong-v5" and config.model.torso == "shallow"
    assert config.impala.batch_size == 8 and config.algorithm is config.impala
    assert config.actors.num_actors == 3 and config.run.seed == 7
    assert config.get("model") == "shallow" and config.replace(seed=2).run.seed == 2
    assert Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.flat()["batch_size"] == 8 and config.flat()["algo"] == "impala"


def test_the_flat_config_of_an_older_checkpoint_still_loads():
    # the config dict gazelle 0.1 saved (one flat ImpalaConfig), with a field since removed
    old = {"env": "ALE/Pong-v5", "model": "shallow", "batch_size": 8, "num_actors": 2,
           "learning_rate": 0.0006, "logdir": "runs/x", "sticky_actions": False,
           "retired_field": 1}  # fmt: skip
    config = Config.from_dict(old)
    assert (config.env.id, config.model.torso, config.impala.batch_size) == (
        "ALE/Pong-v5",
        "shallow",
        8,
    )
    assert config.env.sticky_actions is False and config.run.logdir == "runs/x"


def test_unknown_names_and_another_algorithms_settings_are_config_errors():
    with pytest.raises(ConfigError, match=r"--batch-sise: unknown setting.*--batch-size"):
        Config.of(batch_sise=3)
    with pytest.raises(
        ConfigError, match=re.escape("--algo: invalid value 'ppo'; allowed: impala | a3c")
    ):
        Config.of(algo="ppo")


def test_a_named_preset_picks_its_algorithm_when_algo_is_unset():
    """impala-paper is IMPALA's and universe-starter A3C's: with `--algo` unset they pick
    their algorithm over the env family's; gazelle's preset leaves the family's choice."""
    import gazelle.api

    def algo_of(*argv: str) -> str:
        return config_from_args(build_parser().parse_args(["train", *argv])).algo

    pong = "PongNoFrameskip-v4"
    assert algo_of("--env", pong, "--preset", "impala-paper") == "impala"
    assert algo_of("--env", pong, "--preset", "universe-starter") == "a3c"
    assert algo_of("--preset", "universe-starter") == "a3c"
    assert algo_of("--env", pong, "--preset", "gazelle") == algo_of("--env", pong)
    assert algo_of("--env", pong, "--preset", "universe-starter", "--algo", "a3c") == "a3c"
    mapping = gazelle.api.default_algo(pong, "universe-starter")
    assert mapping == "a3c"


def test_cli_unknown_algo_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "ppo", "--logdir", "/tmp/gz-algo-x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--algo: invalid value 'ppo'; allowed: impala | a3c" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("model", "resnet", "--model"),
        ("reward_clipping", "clip", "--reward-clipping"),
        ("batch_size", 0, "--batch-size"),
        ("discounting", 1.5, "--discounting"),
        ("num_actors", -1, "--num-actors"),
        ("device", "tpu", "--device"),
        ("precision", "fp16", "--precision"),
    ],
)
def test_bad_values_name_the_flag_and_the_allowed_values(field, value, flag):
    with pytest.raises(ConfigError) as err:
        validate(Config.of(**{field: value}))
    message = str(err.value)
    assert message.startswith(flag) and repr(value) in message and "allowed" in message


def test_every_field_has_a_flag_with_help():
    docs = field_docs()
    parser = build_parser()
    help_text = parser._subparsers._group_actions[0].choices["train"].format_help()
    assert set(docs) == set(all_fields())
    for name in all_fields():
        assert docs[name], f"{name} has no docstring"
        assert "--" + name.replace("_", "-") in help_text
    assert "--algo" in help_text


def test_flags_parse_into_the_config():
    args = build_parser().parse_args(
        [
            "train",
            "--env",
            "ALE/Pong-v5",
            "--batch-size",
            "8",
            "--total-frames",
            "1e6",
            "--no-use-lstm",
            "--grad-norm-clip",
            "none",
            "--logdir",
            "x",
        ]
    )
    config = config_from_args(args)
    assert (config.env.id, config.impala.batch_size, config.run.total_frames) == (
        "ALE/Pong-v5",
        8,
        1_000_000,
    )
    assert config.model.use_lstm is False and config.impala.grad_norm_clip is None
    assert config.run.logdir == "x"


def test_default_logdir_is_fresh_per_run(tmp_path, monkeypatch):
    import gazelle.config.presets

    monkeypatch.chdir(tmp_path)
    # why: one clock reading for both, as two runs started in the same second
    monkeypatch.setattr(gazelle.config.presets.time, "strftime", lambda _: "20260101-000000")
    config = config_from_args(build_parser().parse_args(["train"]))
    assert config.run.logdir == "runs/CartPole-v1-20260101-000000"
    # why: two runs started in one second get two folders, never one resuming the other
    Path(config.run.logdir).mkdir(parents=True)
    again = config_from_args(build_parser().parse_args(["train"]))
    assert again.run.logdir is not None and again.run.logdir != config.run.logdir
    assert not Path(again.run.logdir).exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--batch-size", "two"], "--batch-size"),
        (["train", "--unroll-length", "2.5"], "--unroll-length"),
        (["train", "--model", "resnet"], "--model: invalid value 'resnet'; allowed: auto | deep"),
        (["train", "--reward-clipping", "x", "--logdir", "/tmp/gz-x"], "--reward-clipping"),
    ],
)
def test_cli_bad_input_is_one_line(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_unknown_env_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gazelle.cli",
            "train",
            "--env",
            "NoSuchEnv-v9",
            "--logdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--env" in proc.stderr and "NoSuchEnv-v9" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_answers_without_importing_torch():
    """`gazelle --help` and each command's `--help` build the whole parser but import no
    torch (1.5 s of a 0.5 s answer here; `gazelle bench --help` asks the bench's parser,
    which needs it)."""
    code = (
        "import sys\n"
        "from gazelle.cli import main\n"
        "for argv in ([], ['suite'], ['train'], ['test'], ['plot'], ['tune']):\n"
        "    try:\n"
        "        main([*argv, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: gazelle suite" in proc.stdout and "usage: gazelle tune" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "no torch", proc.stdout[-2000:]


def test_default_num_actors_leaves_the_learner_a_core():
    from gazelle.config import default_num_actors

    assert default_num_actors(cores=16) == 15
    assert default_num_actors(cores=4) == 3
    # why: at least 2, so that acting and learning overlap even on a 1- or 2-core machine
    assert default_num_actors(cores=2) == 2
    assert default_num_actors(cores=1) == 2
    assert default_num_actors(num_levels=30, cores=16) == 30


def test_unset_num_actors_resolves_for_this_machine():
    from gazelle.algorithms.impala.build import build
    from gazelle.config import default_num_actors

    run = build(Config.of(env="CartPole-v1"))
    assert run.config.actors.num_actors == default_num_actors()
    assert len(run.transport.fleet.specs) == run.config.actors.num_actors
    multi = build(Config.of(env="CartPole-v1,CartPole-v1,CartPole-v1", model="mlp"))
    assert multi.config.actors.num_actors == default_num_actors(num_levels=3)


def test_multi_task_levels_must_share_observations_and_actions(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "ALE/Breakout-v5,ALE/Pong-v5", "--no-full-action-space",
              "--max-seconds", "1"])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--env: invalid value 'ALE/Breakout-v5,ALE/Pong-v5'" in err
    assert "4 actions" in err and "6 actions" in err and "--full-action-space" in err
    assert "Traceback" not in err


def test_full_action_space_gives_every_game_the_18_actions():
    from gazelle.algorithms.common import env_kwargs, probe

    config = Config.of(env="ALE/Breakout-v5,ALE/Pong-v5", full_action_space=True)
    found = probe(config)
    assert found.levels == ["ALE/Breakout-v5", "ALE/Pong-v5"] and found.kind == "atari"
    assert found.obs_spec.num_actions == 18 and found.action_repeats == 4
    assert env_kwargs(config)["full_action_space"] is True  # the actors' envs get it too


def test_a3c_clips_gradients_on_atari_and_not_on_vector_tasks():
    import math

    a3c = Config.of(algo="a3c", env="CartPole-v1")
    assert a3c.a3c.grad_norm_clip is None  # unset: the family's preset decides
    assert resolve(a3c, VECTOR).a3c.grad_norm_clip == math.inf
    pong = Config.of(algo="a3c", env="ALE/Pong-v5")
    assert resolve(pong, ATARI).a3c.grad_norm_clip == 15.0  # gazelle's, measured on Pong
    seeds = Config.of(algo="a3c", env="ALE/Pong-v5", preset="universe-starter")
    assert resolve(seeds, ATARI).a3c.grad_norm_clip == 40.0
    mine = Config.of(algo="a3c", env="CartPole-v1", grad_norm_clip=40.0)
    assert resolve(mine, VECTOR).a3c.grad_norm_clip == 40.0


def test_train_with_only_a_logdir_resumes_that_run_with_its_own_settings(tmp_path):
    """`gazelle train --logdir DIR --total-frames N` (the hint every run prints) continues the
    run in DIR as it was, whatever its algorithm and env: flags left out take the saved
    run's values, not the defaults (which would be another run, refused at preflight)."""
    saved = Config.of(algo="appo", env="gazelle/Catch-v0", batch_size=4, num_actors=3,
                      max_seconds=60.0, logdir=str(tmp_path))  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(saved.to_dict()))
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # only its presence matters here
    parser = build_parser()
    config = config_from_args(parser.parse_args(["train", "--logdir", str(tmp_path),
                                                 "--total-frames", "5000"]))  # fmt: skip
    assert (config.algo, config.env.id) == ("appo", "gazelle/Catch-v0")
    assert (config.appo.batch_size, config.actors.num_actors) == (4, 3)
    assert config.run.total_frames == 5000 and config.run.max_seconds == 60.0
    # a flag given wins over the saved value
    args = ["train", "--logdir", str(tmp_path), "--batch-size", "8"]
    assert config_from_args(parser.parse_args(args)).appo.batch_size == 8
    # --no-resume, or no checkpoint there: the defaults, as for a new run
    fresh = config_from_args(parser.parse_args(["train", "--logdir", str(tmp_path), "--no-resume"]))
    assert (fresh.algo, fresh.env.id) == ("impala", Config().env.id)
    (tmp_path / "checkpoint.pt").unlink()
    new = config_from_args(parser.parse_args(["train", "--logdir", str(tmp_path)]))
    assert (new.algo, new.env.id) == ("impala", Config().env.id)


def test_activation_comes_from_the_preset_reaches_every_agent_and_is_checked():
    """`--activation`: unset (the torso's own) in every preset; checked at the edge; the
    learner's and every actor's agent get it."""
    from torch import nn

    from gazelle.algorithms.a3c.loop import a3c_agent, worker_specs
    from gazelle.algorithms.a3c.report import describe as describe_a3c
    from gazelle.algorithms.common import model_words, prepare
    from gazelle.algorithms.impala.build import actor_specs
    from gazelle.runtime.actor import actor_agent

    for algo in ("impala", "appo", "a3c"):
        assert resolve(Config.of(algo=algo, env="ALE/Pong-v5"), ATARI).model.activation is None
    with pytest.raises(ConfigError, match=r"^--activation: invalid value 'gelu'; allowed: relu"):
        validate(Config.of(activation="gelu"))
    with pytest.raises(ConfigError, match=r"--activation: invalid value 'elu'; allowed: unset"):
        validate(Config.of(activation="elu", model="mlp"))
    # why: APPO's image preset norms its LSTM core's input, which the line names too.
    runs = (
        ("appo", "shallow", "elu", actor_specs, " core_input_norm"),
        ("a3c", "universe", "relu", worker_specs, ""),
    )
    for algo, torso, activation, specs_of, norm in runs:
        config, found, _ = prepare(Config.of(algo=algo, env="gazelle/Catch-v0", num_actors=2,
                                             model=torso, activation=activation))  # fmt: skip
        specs = specs_of(config, found)
        assert [spec.agent_options["activation"] for spec in specs] == [activation, activation]
        want, other = (nn.ELU, nn.ReLU) if activation == "elu" else (nn.ReLU, nn.ELU)
        for agent in (actor_agent(specs[1]), a3c_agent(config, found.obs_spec)):
            kinds = {type(m) for m in agent.torso.modules()}
            assert want in kinds and other not in kinds
        # the run's first log line names it (unset: the torso alone)
        assert model_words(config) == f"{torso} activation={activation}{norm}"
        assert model_words(dataclasses.replace(config, model=dataclasses.replace(
            config.model, activation=None))) == torso + norm  # fmt: skip
    assert "model=universe activation=relu workers=" in describe_a3c(config, 2)
