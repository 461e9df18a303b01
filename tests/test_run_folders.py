"""A run folder is data: loading its config or checkpoint (`gazelle test`, a resume) imports
nothing the command line does not name, never restores where a run goes (backend, cluster,
dashboard), and every problem with it is one line (exit code 2), not a traceback."""

from __future__ import annotations

import sys
import uuid

import pytest

from gazelle.cli import main

TRAP = '''\
"""Imported only when a user says so: importing it leaves a mark."""
import pathlib

pathlib.Path({mark!r}).write_text("imported")

import gymnasium
from torch import nn


class Net(nn.Module):
    def __init__(self, frame_shape):
        super().__init__()
        self.output_size = 8
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(frame_shape[0], 8), nn.ReLU())

    def forward(self, frames):
        return self.body(frames.float())


gymnasium.register("Trap-{tag}-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
'''


@pytest.fixture
def trap(tmp_path, monkeypatch):
    """A module of a fresh name on sys.path (not imported) that marks its import."""
    name = f"gz_trap_{uuid.uuid4().hex[:8]}"
    mark = tmp_path / f"{name}.imported"
    code = tmp_path / "modules"
    code.mkdir()
    (code / f"{name}.py").write_text(TRAP.format(mark=str(mark), tag=name))
    monkeypatch.syspath_prepend(str(code))
    yield name, mark
    sys.modules.pop(name, None)


def saved_run(logdir, **settings):
    """A run folder as `gazelle train` leaves it: config.json and a checkpoint with it."""
    from gazelle import checkpoint
    from gazelle.algorithms.runstate import write_config
    from gazelle.config import Config

    config = Config.of(**{"env": "CartPole-v1", "logdir": str(logdir), **settings})
    logdir.mkdir(exist_ok=True)
    write_config(logdir, config)
    state = {"agent": {}, "optimizer": {}, "frames": 0, "config": config.to_dict()}
    checkpoint.save(logdir / "checkpoint.pt", state)
    return logdir


def one_line_exit_2(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("field", ["model", "env"])
def test_gazelle_test_imports_no_module_the_run_names_unless_allowed(field, trap, tmp_path, capsys):
    name, mark = trap
    value = f"{name}:Net" if field == "model" else f"{name}:Trap-{name}-v0"
    run = saved_run(tmp_path / "run", **{field: value})
    err = one_line_exit_2(["test", "--logdir", str(run), "--episodes", "1"], capsys)
    assert f"--allow-import {name}" in err and f"module '{name}'" in err, err
    assert not mark.exists() and name not in sys.modules  # refused before any import
    # named by the user: imported (the empty checkpoint's weights then do not fit: one line)
    one_line_exit_2(
        ["test", "--logdir", str(run), "--episodes", "1", "--allow-import", name], capsys
    )
    assert mark.exists()


def test_a_resume_imports_no_module_the_run_names_unless_the_command_names_it(
    trap, tmp_path, capsys, monkeypatch
):
    name, mark = trap
    run = saved_run(tmp_path / "run", model=f"{name}:Net", env=f"{name}:Trap-{name}-v0")
    err = one_line_exit_2(["train", "--logdir", str(run), "--total-frames", "100"], capsys)
    assert "a run folder runs no code unless you say so" in err and name in err, err
    assert not mark.exists() and name not in sys.modules
    # the same torso and env named on this command line: the user's own say
    from gazelle.cli import build_parser, config_from_args

    args = ["train", "--logdir", str(run), "--model", f"{name}:Net"]
    args += ["--env", f"{name}:Trap-{name}-v0"]
    assert config_from_args(build_parser().parse_args(args)).model.torso == f"{name}:Net"
    assert not mark.exists()  # still nothing imported: the run would import it when built
    # or the module allowed: the resumed config keeps the run's torso and env
    allowed = ["train", "--logdir", str(run), "--allow-import", name]
    config = config_from_args(build_parser().parse_args(allowed))
    assert config.model.torso == f"{name}:Net" and config.env.id.startswith(name)


def test_a_resume_takes_where_to_run_from_the_command_only(tmp_path, capsys):
    """A copied run folder must not send this machine's Ray token to the cluster it names:
    the backend, the cluster address, the dashboard and the tokenless allowance are never
    restored; one line says what was left out."""
    from gazelle.cli import build_parser, config_from_args

    run = saved_run(
        tmp_path / "run", backend="ray", ray_address="10.0.0.5:6379", ray_dashboard=True,
        ray_allow_tokenless=True,
    )  # fmt: skip
    config = config_from_args(build_parser().parse_args(["train", "--logdir", str(run)]))
    actors = config.actors
    assert actors.backend == "local" and actors.ray_address is None
    assert not actors.ray_dashboard and not actors.ray_allow_tokenless
    out = capsys.readouterr().out
    assert "--backend ray --ray-address 10.0.0.5:6379" in out and out.count("\n") == 1
    again = ["train", "--logdir", str(run), "--backend", "ray", "--ray-address", "auto"]
    named = config_from_args(build_parser().parse_args(again))
    assert named.actors.backend == "ray" and named.actors.ray_address == "auto"


def test_gazelle_test_errors_are_one_line(tmp_path, capsys):
    """What the issue found ending in tracebacks: an env unknown here (or registered only in
    the process that trained), a checkpoint without a config or frames, a results file that
    cannot be written."""
    from gazelle import checkpoint

    unknown = saved_run(tmp_path / "unknown", env="NoSuchEnv-v0")
    err = one_line_exit_2(["test", "--logdir", str(unknown)], capsys)
    assert "the run's env 'NoSuchEnv-v0' cannot be made here" in err
    registered_elsewhere = saved_run(tmp_path / "registered", env="mypkg/OnlyThere-v0")
    assert "cannot be made here" in one_line_exit_2(
        ["test", "--logdir", str(registered_elsewhere)], capsys
    )
    bare = tmp_path / "bare"
    bare.mkdir()
    checkpoint.save(bare / "checkpoint.pt", {"agent": {}})
    err = one_line_exit_2(["test", "--logdir", str(bare)], capsys)
    assert "holds no 'config' or 'frames'" in err
    blocked = saved_run(tmp_path / "blocked")
    (blocked / "test_results.json").mkdir()
    err = one_line_exit_2(["test", "--logdir", str(blocked)], capsys)
    assert "test_results.json is a directory" in err


def test_a_refused_resume_gives_the_logdir_lock_back(tmp_path, capsys):
    """The next run on the folder found the refused one's pid in the lock file and said it
    was taking over the lock of a run "killed?"."""
    from gazelle.algorithms import runlock
    from gazelle.algorithms.preflight import check_logdir
    from gazelle.config import Config, ConfigError

    logdir = saved_run(tmp_path / "run")
    with pytest.raises(ConfigError, match="as the run in"):
        check_logdir(Config.of(env="Acrobot-v1", logdir=str(logdir)))
    assert (logdir / runlock.LOCK_FILE).read_text() == ""
    runlock.acquire(logdir)  # the next run
    runlock.release(logdir)
    assert "taking over" not in capsys.readouterr().out
