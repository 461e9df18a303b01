"""Config validation and the CLI's handling of bad input: one clear line, no traceback."""

import subprocess
import sys

import pytest

from gazelle.cli import build_parser, config_from_args, field_docs, main
from gazelle.config import ConfigError, ImpalaConfig, resolve, validate


def test_defaults_validate_and_resolve_from_presets():
    config = resolve(validate(ImpalaConfig()), frame_is_image=False)
    assert config.model == "mlp"
    assert config.batch_size and config.unroll_length and config.learning_rate
    atari = resolve(ImpalaConfig(env="ALE/Pong-v5"), frame_is_image=True)
    assert atari.model == "deep" and atari.unroll_length == 20 and atari.batch_size == 32
    dmlab = resolve(ImpalaConfig(env="dmlab30"), frame_is_image=True)
    # the IMPALA seed's defaults
    assert (dmlab.batch_size, dmlab.unroll_length, dmlab.learning_rate) == (2, 100, 0.00048)
    assert (dmlab.entropy_cost, dmlab.epsilon) == (0.00025, 0.1)


def test_explicit_values_beat_the_preset():
    config = resolve(ImpalaConfig(env="ALE/Pong-v5", batch_size=8, model="shallow"), True)
    assert config.batch_size == 8 and config.model == "shallow"


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
        validate(ImpalaConfig(**{field: value}))
    message = str(err.value)
    assert message.startswith(flag) and repr(value) in message and "allowed" in message


def test_every_field_has_a_flag_with_help():
    docs = field_docs()
    parser = build_parser()
    help_text = parser._subparsers._group_actions[0].choices["train"].format_help()
    for name in ImpalaConfig.__dataclass_fields__:
        assert name in docs, f"{name} has no docstring"
        assert "--" + name.replace("_", "-") in help_text


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
    assert (config.env, config.batch_size, config.total_frames) == ("ALE/Pong-v5", 8, 1_000_000)
    assert config.use_lstm is False and config.grad_norm_clip is None and config.logdir == "x"


def test_default_logdir_is_fresh_per_run():
    config = config_from_args(build_parser().parse_args(["train"]))
    assert config.logdir.startswith("runs/CartPole-v1-")


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


def test_default_num_actors_leaves_the_learner_a_core():
    from gazelle.config import default_num_actors

    assert default_num_actors(cores=16) == 15
    assert default_num_actors(cores=4) == 3
    # why: at least 2, so that acting and learning overlap even on a 1- or 2-core machine
    assert default_num_actors(cores=2) == 2
    assert default_num_actors(cores=1) == 2
    assert default_num_actors(num_levels=30, cores=16) == 30


def test_unset_num_actors_resolves_for_this_machine():
    from gazelle.algorithms.setup import prepare
    from gazelle.config import default_num_actors

    run = prepare(ImpalaConfig(env="CartPole-v1"))
    assert run.config.num_actors == default_num_actors()
    assert len(run.actors.specs) == run.config.num_actors
    multi = prepare(ImpalaConfig(env="CartPole-v1,CartPole-v1,CartPole-v1", model="mlp"))
    assert multi.config.num_actors == default_num_actors(num_levels=3)


def test_multi_task_levels_must_share_observations_and_actions(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "ALE/Breakout-v5,ALE/Pong-v5", "--max-seconds", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--env: invalid value 'ALE/Breakout-v5,ALE/Pong-v5'" in err
    assert "4 actions" in err and "6 actions" in err and "--full-action-space" in err
    assert "Traceback" not in err


def test_full_action_space_gives_every_game_the_18_actions():
    from gazelle.algorithms.setup import env_kwargs, probe

    config = ImpalaConfig(env="ALE/Breakout-v5,ALE/Pong-v5", full_action_space=True)
    levels, spec, repeats, kind = probe(config)
    assert levels == ["ALE/Breakout-v5", "ALE/Pong-v5"] and kind == "atari"
    assert spec.num_actions == 18 and repeats == 4
    assert env_kwargs(config)["full_action_space"] is True  # the actors' envs get it too
