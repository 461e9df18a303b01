"""Bad input, before any process starts: one line naming the problem and what is allowed,
exit code 2, no traceback, and no actor process started. The table is the contract."""

import multiprocessing
import os
import stat

import pytest
import torch

from gazelle.cli import main
from gazelle.models import tokenize

#: (flags after `gazelle train`, text the one line must contain)
CASES = [
    (["--env", "CartPol-v1"], "--env: invalid value 'CartPol-v1'"),
    (["--env", "CartPol-v1"], "did you mean 'CartPole-v1'"),
    (["--env", "CartPole-v1", "--model", "deep"],
     "--model: invalid value 'deep'; allowed: a torso for (4,) frames: mlp"),
    (["--env", "ALE/Pong-v5", "--model", "mlp"],
     "--model: invalid value 'mlp'; allowed: a torso for (4, 84, 84) frames"),
    (["--num-actors", "0"], "--num-actors: invalid value 0; allowed: a positive integer"),
    (["--unroll-length", "0"], "--unroll-length: invalid value 0; allowed: a positive integer"),
    (["--batch-size", "64", "--num-actors", "2", "--envs-per-actor", "2", "--slots-per-env", "1"],
     "--batch-size: 64 unrolls per batch, but the actors hold only 4"),
    (["--envs-per-actor", "-3"], "--envs-per-actor: invalid value -3"),
    (["--learning-rate", "0"], "--learning-rate: invalid value 0.0; allowed: a positive number"),
    (["--discounting", "1.5"], "--discounting: invalid value 1.5; allowed: a number in [0.0, 1.0]"),
    (["--optimizer", "sgd"],
     "--optimizer: invalid value 'sgd'; allowed: rmsprop_tf | rmsprop | adam"),
    (["--preset", "fast"], "--preset: invalid value 'fast'; allowed:"),
    (["--algo", "ppo"], "--algo: invalid value 'ppo'; allowed: impala | a3c"),
    (["--device", "tpu"], "--device: invalid value 'tpu'"),
    (["--backend", "mpi"], "--backend: invalid value 'mpi'; allowed: local"),
    (["--actor-timeout-s", "0"], "--actor-timeout-s: invalid value 0.0"),
    (["--env", "Pendulum-v1", "--algo", "a3c", "--normalize-obs"],
     "--normalize-obs: invalid value True; allowed: off with --algo a3c"),
    (["--env", "Pendulum-v1", "--separate-value", "--use-lstm"],
     "--separate-value: invalid value True; allowed: off with the LSTM core"),
]  # fmt: skip


def train_error(argv, capsys):
    before = set(multiprocessing.active_children())
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert set(multiprocessing.active_children()) == before, "a process was started"
    return err


@pytest.mark.parametrize(("flags", "expected"), CASES)
def test_bad_flags_are_one_line_before_anything_starts(flags, expected, tmp_path, capsys):
    err = train_error([*flags, "--logdir", str(tmp_path / "run")], capsys)
    assert expected in err, err


def test_an_unwritable_logdir_is_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.access(locked, os.W_OK):  # e.g. running as root: permissions do not bind
        target = "/proc/gazelle-cannot-write-here"
    else:
        target = str(locked / "run")
    err = train_error(["--logdir", target], capsys)
    assert "--logdir: invalid value" in err and "a directory this user can create and write" in err


def test_a_logdir_of_another_run_is_one_line(tmp_path, capsys):
    from gazelle import checkpoint
    from gazelle.algorithms.runstate import write_config
    from gazelle.config import Config

    write_config(tmp_path, Config.of(env="gazelle/Memory-v0", model="mlp"))
    checkpoint.save(tmp_path / "checkpoint.pt", {"frames": 0})
    err = train_error(["--env", "CartPole-v1", "--logdir", str(tmp_path)], capsys)
    assert "--env: invalid value 'CartPole-v1'; allowed: 'gazelle/Memory-v0'" in err
    assert "--no-resume" in err


@pytest.mark.parametrize("content", [b"not a checkpoint at all", b""])
def test_a_corrupt_or_foreign_checkpoint_is_one_line(tmp_path, capsys, content):
    (tmp_path / "checkpoint.pt").write_bytes(content)
    err = train_error(["--logdir", str(tmp_path), "--total-frames", "1000"], capsys)
    assert "cannot load checkpoint" in err and "--no-resume" in err


class ForeignThing:
    """Not a tensor, container or plain scalar."""


def test_a_foreign_object_in_a_checkpoint_is_refused(tmp_path, capsys):
    # a pickle of an arbitrary class instance: weights_only loading refuses it
    torch.save({"agent": ForeignThing()}, tmp_path / "checkpoint.pt")
    err = train_error(["--logdir", str(tmp_path), "--total-frames", "1000"], capsys)
    assert "cannot load checkpoint" in err


@pytest.mark.parametrize(
    "text",
    ["", "go to the red ball", "x" * 10_000, " ".join(["word"] * 500), "aller à la clé 🔑 红",
     "\\x00\\t\\n weird\\u200b spacing"],
)  # fmt: skip
def test_instructions_of_any_length_and_charset_tokenize(text):
    ids = tokenize([text])
    assert ids.shape == (1, 32) and ids.dtype.kind == "i" and (ids >= 0).all()
    assert (ids > 0).sum() == min(len(text.split()), 32)


def test_resuming_with_another_activation_is_one_line_and_an_older_run_reads_as_relu(
    tmp_path, capsys
):
    """The activation is part of the network: a run resumed with another is refused (its
    weights were trained through the other); a checkpoint from before `--activation`
    (none saved) is the network its torso then ran (its own activation)."""
    from gazelle import checkpoint
    from gazelle.algorithms.runstate import _network_value, write_config
    from gazelle.config import Config

    write_config(tmp_path, Config.of(env="gazelle/Catch-v0", model="shallow", activation="relu"))
    checkpoint.save(tmp_path / "checkpoint.pt", {"frames": 0})
    err = train_error(["--logdir", str(tmp_path), "--activation", "elu"], capsys)
    assert "--activation: invalid value 'elu'; allowed: 'relu'" in err and "--no-resume" in err
    older = Config.of(env="gazelle/Catch-v0", model="shallow")
    assert _network_value(older, "activation") == "relu"
    assert _network_value(older.replace(model="universe"), "activation") == "elu"
    assert _network_value(older.replace(model="mlp"), "activation") is None


def test_resuming_with_the_background_changed_is_refused_and_an_older_run_keeps_its_frames(
    tmp_path, capsys
):
    """The frames' background is part of the network's input: a run resumed with it changed
    is refused; a run saved before the flag (none in its config) resumes without it, even
    where the preset now turns it on."""
    from gazelle import checkpoint
    from gazelle.algorithms.runstate import saved_config, write_config
    from gazelle.cli import build_parser, config_from_args
    from gazelle.config import Config

    older = Config.of(env="gazelle/Catch-v0", model="shallow")
    assert older.model.subtract_background is None  # as a config.json saved before the flag
    write_config(tmp_path, older)
    checkpoint.save(tmp_path / "checkpoint.pt", {"frames": 0})
    err = train_error(["--logdir", str(tmp_path), "--subtract-background"], capsys)
    assert "--subtract-background: invalid value True; allowed: False" in err
    assert "--no-resume" in err
    resumed = config_from_args(build_parser().parse_args(["train", "--logdir", str(tmp_path)]))
    assert resumed.model.subtract_background is False
    assert saved_config(older.to_dict()).model.subtract_background is False
