"""The Python API: `gazelle.train`, registered torsos and envs (bad input is one line), and
registrations reaching spawned child processes."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.process
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import gazelle
from gazelle import plugins, registrations
from gazelle.backends.local.process import TaskFleet
from gazelle.config import Config, ConfigError, validate
from gazelle.models.custom import CustomTorso
from gazelle.models.torso_factory import make_torso
from gazelle.models.torsos import MLPTorso, Torso


class TinyTorso(nn.Module):
    """A vector torso of the user's own: `[N, D]` -> `[N, 8]`."""

    def __init__(self, frame_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.output_size = 8
        self.linear = nn.Linear(frame_shape[0], 8)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(frames.float()))


class WrongShapeTorso(TinyTorso):
    """Says 8 features, gives 3."""

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return super().forward(frames)[:, :3]


def no_size_torso(frame_shape: tuple[int, ...]) -> nn.Module:
    return nn.Linear(frame_shape[0], 4)  # no output_size


def failing_torso(frame_shape: tuple[int, ...]) -> nn.Module:
    raise RuntimeError("out of ideas")


class CountEnv(gymnasium.Env):
    """`frame` = (7, step / 10): a marker only this env produces."""

    observation_space = spaces.Dict({"frame": spaces.Box(-10, 10, (2,), np.float32)})
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"frame": np.array([7.0, 0.0], np.float32)}, {}

    def step(self, action):
        self.t += 1
        return {"frame": np.array([7.0, self.t / 10], np.float32)}, 1.0, self.t >= 10, False, {}


@pytest.fixture(autouse=True)
def forget_registrations():
    """Each test starts and ends with what was registered before it."""
    before = registrations.capture()
    yield
    after = registrations.capture()
    for name in {n for n, _ in after.torsos} - {n for n, _ in before.torsos}:
        plugins.forget(name)
    for name in {e.name for e in after.envs} - {e.name for e in before.envs}:
        plugins.forget(name)


def test_a_registered_torso_is_built_by_name_everywhere_a_built_in_one_is():
    gazelle.register_torso("tiny", TinyTorso)
    gazelle.register_torso("tiny", TinyTorso)  # the same factory again: a no-op
    validate(Config.of(model="tiny"))
    torso = make_torso("tiny", (4,))
    assert isinstance(torso, CustomTorso) and torso.output_size == 8
    assert torso(torch.ones(5, 4)).shape == (5, 8)
    agent = gazelle.Agent(gazelle.ObsSpec((4,), np.dtype(np.float32), 2), torso="tiny")
    assert isinstance(agent.torso, CustomTorso)


class TinyImageTorso(nn.Module):
    """An image torso of the user's own: `[N, C, H, W]` -> `[N, 6]`."""

    def __init__(self, frame_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.output_size = 6
        self.linear = nn.Linear(int(np.prod(frame_shape)), 6)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(frames.float().flatten(1) / 255.0))


def test_a_registered_torso_encodes_the_image_keys_of_a_dict_observation():
    from gazelle.types import DISCRETE, IMAGE, VECTOR, ObsField, ObsSpec

    gazelle.register_torso("tiny-image", TinyImageTorso)
    fields = (
        ObsField("screen", IMAGE, (3, 8, 8)),
        ObsField("health", VECTOR, (2,)),
        ObsField("room", DISCRETE, (1,), sizes=(4,)),
    )
    agent = gazelle.Agent(ObsSpec(fields=fields, num_actions=3), torso="tiny-image")
    assert isinstance(agent.encoders["screen"], CustomTorso)
    assert not isinstance(agent.encoders["health"], CustomTorso)  # vectors: their own MLP
    obs = {
        "screen": torch.randint(0, 256, (1, 2, 3, 8, 8), dtype=torch.uint8),
        "health": torch.randn(1, 2, 2),
        "room": torch.randint(0, 4, (1, 2, 1)),
    }
    calls = []
    agent.encoders["screen"].register_forward_hook(lambda m, a, out: calls.append(out.shape))
    zeros = torch.zeros(1, 2, dtype=torch.long)
    out, _ = agent.unroll(obs, zeros, zeros.float(), zeros.bool(), agent.initial_state(2))
    assert calls == [(2, 6)] and out.policy_logits.shape == (1, 2, 3)


def test_a_module_path_is_a_torso_name_without_registering():
    path = f"{__name__}:TinyTorso"
    validate(Config.of(model=path))
    assert make_torso(path, (3,)).output_size == 8


def test_a_torso_subclass_keeps_its_class_and_its_frame_check():
    gazelle.register_torso("mlp2", MLPTorso)
    assert type(make_torso("mlp2", (4,))) is MLPTorso
    with pytest.raises(ValueError, match="needs vector frames"):
        make_torso("mlp2", (3, 8, 8))


@pytest.mark.parametrize(
    ("name", "factory", "error", "message"),
    [
        ("wide", 42, TypeError, "torso factory 42: not callable; allowed: a module-level"),
        ("wide", lambda shape: TinyTorso(shape), ValueError, "cannot reach the actor processes"),
        ("wide", "no colon", ValueError, "invalid path; allowed: 'module:attr'"),
        ("my torso", TinyTorso, ValueError, "torso name 'my torso': invalid; allowed: letters"),
        ("a:b", TinyTorso, ValueError, "torso name 'a:b': invalid"),
        ("deep", TinyTorso, ValueError, "torso name 'deep' is built in; allowed: a name other"),
        ("auto", TinyTorso, ValueError, "torso name 'auto' is built in"),
    ],
)
def test_bad_torso_registrations_are_one_line(name, factory, error, message):
    with pytest.raises(error) as err:
        gazelle.register_torso(name, factory)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert name not in registrations.torso_names()


def test_a_taken_torso_name_needs_replace():
    gazelle.register_torso("tiny", TinyTorso)
    with pytest.raises(ValueError, match=r"torso 'tiny' is already registered \(as .*TinyTorso"):
        gazelle.register_torso("tiny", WrongShapeTorso)
    gazelle.register_torso("tiny", WrongShapeTorso, replace=True)
    assert registrations.torso_ref("tiny") is WrongShapeTorso


def test_an_unknown_torso_names_the_registered_ones():
    gazelle.register_torso("tiny", TinyTorso)
    with pytest.raises(ConfigError) as err:
        validate(Config.of(model="resnet"))
    assert str(err.value).startswith("--model: invalid value 'resnet'; allowed: auto | deep")
    assert "| tiny |" in str(err.value)
    with pytest.raises(ValueError, match=r"unknown torso 'resnet'; expected one of .*mlp \| tiny"):
        make_torso("resnet", (4,))


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (no_size_torso, "returned a Linear with output_size None; allowed: an nn.Module"),
        (failing_torso, "failing_torso((4,)) raised RuntimeError: out of ideas"),
        (f"{__name__}:Missing", "cannot import it"),
    ],
)
def test_a_torso_that_cannot_be_built_is_one_line(factory, message):
    gazelle.register_torso("broken", factory)
    with pytest.raises(ValueError) as err:
        make_torso("broken", (4,))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_train_rejects_a_torso_with_the_wrong_output_before_any_process(tmp_path):
    gazelle.register_torso("wrong", WrongShapeTorso)
    before = set(multiprocessing.active_children())
    with pytest.raises(ConfigError) as err:
        gazelle.train(Config.of(env="CartPole-v1", model="wrong", logdir=str(tmp_path)))
    message = str(err.value)
    assert message.startswith("--model: invalid value 'wrong'; allowed: a torso for (4,) frames")
    assert "to (2, 3); allowed: features [N, output_size] = (2, 8)" in message
    assert set(multiprocessing.active_children()) == before


def test_train_takes_a_dict_and_overrides_and_rejects_other_configs(tmp_path):
    with pytest.raises(ConfigError, match="--num-actors: invalid value 0"):
        gazelle.train({"env": "CartPole-v1", "logdir": str(tmp_path)}, num_actors=0)
    with pytest.raises(ConfigError, match="--batchsize: unknown setting"):
        gazelle.train(Config(), batchsize=8)
    with pytest.raises(TypeError, match=r"config 'CartPole-v1': not a gazelle config"):
        gazelle.train("CartPole-v1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--algo: invalid value 'a3c'; allowed: impala"):
        gazelle.train(Config.of(algo="a3c"), loss_fn=lambda agent, batch: (None, {}))


def test_train_refuses_to_run_inside_a_spawned_import(monkeypatch):
    monkeypatch.setattr(
        multiprocessing.process.current_process(), "_inheriting", True, raising=False
    )
    with pytest.raises(RuntimeError, match="under `if __name__ == '__main__':`"):
        gazelle.train()


def test_a_registered_env_is_made_by_id():
    gazelle.register_env("ApiCount-v0", CountEnv, max_episode_steps=5)
    env = gazelle.make("ApiCount-v0", seed=0)
    obs, _ = env.reset()
    assert obs["frame"].tolist() == [7.0, 0.0] and env.action_space.n == 3
    for _ in range(5):
        *_, terminated, truncated, _ = env.step(0)
    assert truncated and not terminated  # the registered time limit


@pytest.mark.parametrize(
    ("name", "maker", "error", "message"),
    [
        ("Bad Id", CountEnv, ValueError, "env name 'Bad Id': invalid; allowed: a Gymnasium id"),
        ("a,b-v0", CountEnv, ValueError, "env name 'a,b-v0': invalid"),
        ("CartPole-v1", CountEnv, ValueError, "'CartPole-v1' is already a Gymnasium id"),
        ("Fine-v0", None, TypeError, "env factory None: not callable"),
        ("Fine-v0", lambda: CountEnv(), ValueError, "cannot reach the actor processes"),
    ],
)
def test_bad_env_registrations_are_one_line(name, maker, error, message):
    with pytest.raises(error) as err:
        gazelle.register_env(name, maker)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_taken_env_id_needs_replace():
    gazelle.register_env("ApiCount-v0", CountEnv)
    gazelle.register_env("ApiCount-v0", CountEnv)  # the same again: a no-op
    with pytest.raises(ValueError, match=r"env 'ApiCount-v0' is already registered"):
        gazelle.register_env("ApiCount-v0", CountEnv, max_episode_steps=3)
    gazelle.register_env("ApiCount-v0", CountEnv, max_episode_steps=3, replace=True)
    assert gymnasium.spec("ApiCount-v0").max_episode_steps == 3


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    actor_id: int
    seed: int


def probe_child(spec: ProbeSpec, child) -> None:
    """In a spawned child: make the registered env and torso, report what came out."""
    try:
        from gazelle.envs import make, obs_spec

        env = make("ApiCount-v0", seed=spec.seed)
        frame = env.reset()[0]["frame"].tolist()
        torso = make_torso("tiny", obs_spec(env).frame_shape)
        child.report({"type": "probe", "frame": frame, "output_size": torso.output_size})
    except Exception as err:
        child.report({"type": "probe", "error": f"{type(err).__name__}: {err}"[:300]})
    while not child.waiting():  # why: a process that ends is restarted by its fleet
        time.sleep(0.05)


def probe_in_child() -> dict:
    fleet = TaskFleet([ProbeSpec(0, 0)], probe_child, ())
    fleet.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            probes = [e for e in fleet.poll() if e["type"] == "probe"]
            if probes:
                return probes[0]
            time.sleep(0.05)
        raise AssertionError("no report from the child")
    finally:
        fleet.close()


@pytest.mark.slow
def test_registrations_reach_spawned_children(monkeypatch):
    gazelle.register_torso("tiny", TinyTorso)
    gazelle.register_env("ApiCount-v0", CountEnv)
    assert probe_in_child() == {"type": "probe", "frame": [7.0, 0.0], "output_size": 8}
    # Without the registrations sent along, the child knows neither name: the test above
    # depends on them, not on anything the child would find by itself.
    monkeypatch.setattr(registrations, "capture", lambda: registrations.Registrations((), ()))
    report = probe_in_child()
    assert "ApiCount-v0" in report["error"], report


def test_bench_parts_measure_a_registered_torso_and_env(tmp_path):
    from gazelle.bench.parts import measure_parts

    gazelle.register_torso("tiny", TinyTorso)
    gazelle.register_env("ApiCount-v0", CountEnv)
    config = Config.of(
        env="ApiCount-v0", model="tiny", num_actors=1, envs_per_actor=2, batch_size=2,
        unroll_length=5, logdir=str(tmp_path),
    )  # fmt: skip
    out = measure_parts(config, seconds=0.3, rounds=1)
    assert out["config"].model.torso == "tiny"
    assert all(rate > 0 for rate in out["rates"].values()), out["rates"]


@pytest.mark.slow
def test_a_module_path_torso_trains_and_is_tested_by_a_fresh_process(tmp_path):
    """No registration anywhere: the actors and a later `gazelle test` process import it."""
    path = f"{__name__}:TinyTorso"
    result = gazelle.train(
        Config.of(env="CartPole-v1", model=path, num_actors=1, envs_per_actor=2, batch_size=2,
                  unroll_length=10, total_frames=400, logdir=str(tmp_path)),
    )  # fmt: skip
    assert result.frames >= 400 and result.actor_restarts == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "gazelle.cli", "test", "--logdir", str(tmp_path), "--episodes", "2",
         "--allow-import", "test_api"],  # why: a run folder imports nothing unasked
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CartPole-v1: mean return" in done.stdout


def test_torso_is_exported_for_subclassing():
    assert gazelle.Torso is Torso


def test_every_public_name_is_the_same_object_on_every_access():
    """`gazelle.evaluation` was the function once, then the submodule of the same name (its
    import bound the module as the package's attribute): every export is checked twice, in
    a fresh interpreter, after its module was imported."""
    import subprocess
    import sys

    code = (
        "import gazelle, importlib\n"
        "for name in gazelle.__all__:\n"
        "    first = getattr(gazelle, name)\n"
        "    importlib.import_module('gazelle.evaluation')\n"
        "    assert getattr(gazelle, name) is first, name\n"
        "assert callable(gazelle.evaluate) and callable(gazelle.train)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.slow
def test_train_without_a_logdir_starts_a_fresh_folder_each_call(tmp_path, monkeypatch, capsys):
    """As `gazelle train`: no logdir named, a new `runs/<env>-<time>` folder per call, so
    that a second call in the same second does not resume the first (it was `runs/default`
    for the API, and two calls resumed each other); naming one of them continues it."""
    monkeypatch.chdir(tmp_path)
    settings = dict(env="CartPole-v1", num_actors=1, envs_per_actor=2, batch_size=2,
                    unroll_length=10, total_frames=400)  # fmt: skip
    first = gazelle.train(settings)
    second = gazelle.train(Config.of(**settings))
    assert first.logdir != second.logdir
    for result in (first, second):
        assert result.logdir.parent == Path("runs") and result.logdir.name.startswith(
            "CartPole-v1-"
        )
        assert (tmp_path / result.logdir / "checkpoint.pt").is_file()
        assert json.loads((tmp_path / result.logdir / "config.json").read_text())["run"][
            "logdir"
        ] == str(result.logdir)
    assert "resumed" not in capsys.readouterr().out
    # A mapping naming only a saved run's logdir and a new budget continues that run with
    # its saved settings, as `gazelle train --logdir DIR --total-frames N` (before, the
    # names it left out took the defaults: 8 envs per actor, batches of 16 unrolls of 20).
    more = gazelle.train({"logdir": str(first.logdir), "total_frames": 800})
    assert more.frames >= 800 and "resumed from" in capsys.readouterr().out
    saved = json.loads((tmp_path / first.logdir / "config.json").read_text())
    assert saved["run"]["total_frames"] == 800
    assert (saved["actors"]["envs_per_actor"], saved["impala"]["batch_size"]) == (2, 2)
    assert saved["impala"]["unroll_length"] == 10
