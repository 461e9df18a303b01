"""`make` for any Gymnasium id (`gazelle.envs.registry`, `gazelle.envs.adapter`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from gazelle.envs import default_action_repeats, expand_levels, make, obs_spec
from gazelle.envs.adapter import GymAdapter


class _Toy(gymnasium.Env):
    """Counts steps; reward = 1 per step; ends after `length` steps; records native actions."""

    def __init__(self, obs_space: spaces.Space, action_space: spaces.Space, length: int = 5):
        self.observation_space, self.action_space, self.length = obs_space, action_space, length
        self.native_actions: list[Any] = []
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any):
        self.native_actions.append(action)
        self.t += 1
        return self.observation_space.sample(), 1.0, self.t >= self.length, False, {}


def test_cartpole_vector_obs() -> None:
    env = make("CartPole-v1", seed=0)
    spec = obs_spec(env)
    assert spec.frame_shape == (4,) and spec.frame_dtype == np.float32 and spec.num_actions == 2
    obs, _ = env.reset()
    assert obs["frame"].dtype == np.float32 and env.observation_space.contains(obs)
    _, reward, terminated, truncated, info = env.step(1)
    assert reward == 1.0 and info["game_over"] == (terminated or truncated)
    assert default_action_repeats("CartPole-v1") == 1


def test_seed_makes_first_reset_reproducible() -> None:
    first = make("CartPole-v1", seed=11).reset()[0]["frame"]
    second = make("CartPole-v1", seed=11).reset()[0]["frame"]
    other = make("CartPole-v1", seed=12).reset()[0]["frame"]
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_image_obs_becomes_chw_uint8() -> None:
    env = GymAdapter(_Toy(spaces.Box(0, 255, (6, 5, 3), np.uint8), spaces.Discrete(2)))
    obs_native = env.env.observation_space.sample()
    converted = env._convert(obs_native)["frame"]
    assert converted.shape == (3, 6, 5) and converted.flags.c_contiguous
    np.testing.assert_array_equal(converted[2], obs_native[:, :, 2])
    gray = GymAdapter(_Toy(spaces.Box(0, 255, (6, 5), np.uint8), spaces.Discrete(2)))
    assert obs_spec(gray).frame_shape == (1, 6, 5)


def test_discrete_obs_is_one_hot() -> None:
    env = GymAdapter(_Toy(spaces.Discrete(4, start=1), spaces.Discrete(2)))
    assert obs_spec(env).frame_shape == (4,)
    assert env._convert(3)["frame"].tolist() == [0, 0, 1, 0]


def test_action_repeats_sum_rewards_and_stop_at_end() -> None:
    toy = _Toy(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2), length=5)
    env = GymAdapter(toy, num_action_repeats=2)
    env.reset(seed=0)
    assert env.step(0)[1] == 2.0 and env.step(0)[1] == 2.0
    _, reward, terminated, _, info = env.step(0)
    assert reward == 1.0 and terminated and info["game_over"] and toy.t == 5


def test_unsupported_obs_space_named() -> None:
    toy = _Toy(spaces.Sequence(spaces.Discrete(2)), spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"unsupported observation space Sequence\(Discrete"):
        GymAdapter(toy)


def test_unknown_id_is_clear_with_suggestion() -> None:
    with pytest.raises(ValueError, match=r"unknown environment 'CartPol-v1'.*'CartPole-v1'"):
        make("CartPol-v1")
    with pytest.raises(ValueError, match=r"unknown environment 'NoSuchThing-v9'"):
        make("NoSuchThing-v9")
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module_xyz'"):
        make("no_such_module_xyz:Foo-v0")


def test_atari_only_flags_rejected_elsewhere() -> None:
    with pytest.raises(ValueError, match="Atari only"):
        make("CartPole-v1", sticky_actions=True)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A third-party module that registers `GazelleTestPlugin-v0` when imported."""
    name = "gazelle_test_plugin"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(f"""
        import gymnasium
        if "GazelleTestPlugin-v0" not in gymnasium.registry:
            gymnasium.register("GazelleTestPlugin-v0",
                               entry_point="gymnasium.envs.classic_control:CartPoleEnv")
        if "{name}/Other-v0" not in gymnasium.registry:
            gymnasium.register("{name}/Other-v0",
                               entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    for env_id in ("GazelleTestPlugin-v0", f"{name}/Other-v0"):
        gymnasium.registry.pop(env_id, None)


def test_module_colon_and_slash_forms_import_first(plugin: str) -> None:
    assert "GazelleTestPlugin-v0" not in gymnasium.registry
    env = make(f"{plugin}:GazelleTestPlugin-v0", seed=0)
    assert obs_spec(env).frame_shape == (4,)
    gymnasium.registry.pop("GazelleTestPlugin-v0")
    sys.modules.pop(plugin)
    env = make(f"{plugin}/Other-v0", seed=0)
    assert obs_spec(env).num_actions == 2


def test_expand_levels() -> None:
    assert expand_levels(" CartPole-v1 , ALE/Pong-v5 ") == ["CartPole-v1", "ALE/Pong-v5"]
    assert len(expand_levels("dmlab30,CartPole-v1")) == 31
    with pytest.raises(ValueError, match="no environment"):
        expand_levels(" , ")
    assert default_action_repeats("dmlab30") == 4 and default_action_repeats("dmlab:x") == 4


def test_envs_do_not_import_torch():
    """Every env worker process imports gazelle.envs; torch would add ~1.5 s to each start."""
    code = (
        "import sys, gazelle.envs as e\n"
        "for spec in ('ALE/Pong-v5', 'CartPole-v1', 'gazelle/Memory-v0',"
        " 'BabyAI-GoToLocalS6N2-v0'):\n"
        "    env = e.make(spec)\n"
        "    env.reset(seed=0)\n"
        "    env.step(env.action_space.sample())\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
