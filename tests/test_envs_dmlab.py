"""DMLab adapter (`gazelle.envs.dmlab`) against the fake `deepmind_lab` in tests/fakes."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from gazelle.envs import LEVEL_MAPPING, expand_levels, make, obs_spec
from gazelle.envs.dmlab import DEFAULT_ACTION_SET, TEST_MIXER_SEED, LevelCache
from gazelle.envs.dmlab30 import TEST_LEVELS, TRAIN_LEVELS

FAKE_PATH = Path(__file__).parent / "fakes" / "deepmind_lab.py"


@pytest.fixture
def fake_lab(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh fake `deepmind_lab` module, importable for this test only."""
    spec = importlib.util.spec_from_file_location("deepmind_lab", FAKE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "deepmind_lab", module)
    return module


def test_missing_module_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # why: a None entry in sys.modules makes `import deepmind_lab` raise ImportError.
    monkeypatch.setitem(sys.modules, "deepmind_lab", None)
    with pytest.raises(ImportError, match=r"deepmind_lab.*not on PyPI.*Bazel"):
        make("dmlab:rooms_watermaze")


def test_obs_spaces_shapes_and_level_path(fake_lab: ModuleType) -> None:
    env = make("dmlab:rooms_watermaze", seed=0)
    lab = fake_lab.instances[-1]
    assert lab.level == "contributed/dmlab30/rooms_watermaze"
    assert lab.observation_names == ["RGB_INTERLEAVED", "INSTR"]
    assert lab.config == {"width": "96", "height": "72"}
    spec = obs_spec(env)
    assert spec.frame_shape == (3, 72, 96) and spec.frame_dtype == np.uint8
    assert spec.num_actions == 9 and spec.has_instruction
    obs, _ = env.reset()
    frame = obs["frame"]
    assert frame.shape == (3, 72, 96) and frame.dtype == np.uint8
    # why: the fake draws column index in channel 1 and row index in channel 2 (HWC -> CHW).
    assert frame[1, 5, 17] == 17 and frame[2, 5, 17] == 5
    assert obs["instruction"] == ""
    assert env.observation_space.contains(obs)


def test_non_dmlab30_level_is_passed_unchanged(fake_lab: ModuleType) -> None:
    make("dmlab:seekavoid_arena_01", width=32, height=24, with_instruction=False)
    lab = fake_lab.instances[-1]
    assert lab.level == "seekavoid_arena_01"
    assert lab.observation_names == ["RGB_INTERLEAVED"]
    assert lab.config["width"] == "32" and lab.config["height"] == "24"


def test_language_level_instruction_passthrough(fake_lab: ModuleType) -> None:
    env = make("dmlab:language_select_described_object", seed=1)
    obs, _ = env.reset()
    assert obs["instruction"] == fake_lab.INSTRUCTION
    obs, *_ = env.step(0)
    assert obs["instruction"] == fake_lab.INSTRUCTION


def test_action_set_maps_to_action_vectors_with_repeats(fake_lab: ModuleType) -> None:
    env = make("dmlab:rooms_watermaze", seed=0, config={"fakeEpisodeFrames": 1000})
    lab = fake_lab.instances[-1]
    env.reset()
    rewards = [env.step(i)[1] for i in range(9)]
    assert [vector for vector, _ in lab.actions] == list(DEFAULT_ACTION_SET)
    assert all(num_steps == 4 for _, num_steps in lab.actions)
    assert DEFAULT_ACTION_SET[0] == (0, 0, 0, 1, 0, 0, 0)  # forward
    assert DEFAULT_ACTION_SET[4] == (-20, 0, 0, 0, 0, 0, 0)  # look left
    assert DEFAULT_ACTION_SET[8] == (0, 0, 0, 0, 1, 0, 0)  # fire
    # why: the fake rewards move_back_forward per frame: forward +4, backward -4 over 4 frames.
    assert rewards[0] == 4.0 and rewards[1] == -4.0 and rewards[6] == 4.0 and rewards[2] == 0.0


def test_num_action_repeats_and_episode_end(fake_lab: ModuleType) -> None:
    env = make("dmlab:rooms_watermaze", seed=0, num_action_repeats=8)
    lab = fake_lab.instances[-1]
    obs, _ = env.reset()
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(0)
        total, steps = total + reward, steps + 1
        if terminated:
            break
        assert not info["game_over"]
    assert steps == fake_lab.EPISODE_FRAMES // 8 and lab.num_steps() == fake_lab.EPISODE_FRAMES
    assert total == fake_lab.EPISODE_FRAMES and not truncated and info["game_over"]
    # why: DMLab has no observation after the end: the last one is repeated.
    assert obs["frame"][0, 0, 0] == fake_lab.EPISODE_FRAMES - 8
    env.reset()
    assert lab.is_running()


def test_train_config_has_no_test_keys(fake_lab: ModuleType) -> None:
    make("dmlab:rooms_watermaze", dataset_path="/data/brady")
    config = fake_lab.instances[-1].config
    assert config["datasetPath"] == "/data/brady"
    assert "allowHoldOutLevels" not in config and "mixerSeed" not in config


def test_test_mode_config(fake_lab: ModuleType) -> None:
    make("dmlab:rooms_collect_good_objects_test", test_mode=True)
    config = fake_lab.instances[-1].config
    assert config["allowHoldOutLevels"] == "true"
    assert config["mixerSeed"] == str(0x600D5EED) == "1611489005"
    assert TEST_MIXER_SEED == 0x600D5EED


def test_seeds_are_reproducible_and_vary_per_episode(fake_lab: ModuleType) -> None:
    for _ in range(2):
        env = make("dmlab:rooms_watermaze", seed=7)
        env.reset()
        env.reset()
    first, second = fake_lab.instances[-2].seeds, fake_lab.instances[-1].seeds
    assert first == second and first[0] != first[1]
    assert all(isinstance(s, int) for s in first)


def test_level_cache_compiles_once(fake_lab: ModuleType, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    make("dmlab:rooms_watermaze", level_cache_dir=str(cache_dir))
    assert fake_lab.instances[-1].compiled
    assert len([f for f in os.listdir(cache_dir) if not f.startswith(".")]) == 1
    make("dmlab:rooms_watermaze", level_cache_dir=str(cache_dir))
    assert not fake_lab.instances[-1].compiled
    make("dmlab:rooms_keys_doors_puzzle", level_cache_dir=str(cache_dir))
    assert fake_lab.instances[-1].compiled
    assert len(os.listdir(cache_dir)) == 2


def test_level_cache_fetch_and_write(tmp_path: Path) -> None:
    cache = LevelCache(tmp_path / "c")
    src, dst = tmp_path / "src.pk3", tmp_path / "dst.pk3"
    assert not cache.fetch("k", str(dst))
    src.write_bytes(b"map")
    cache.write("k", str(src))
    assert cache.fetch("k", str(dst)) and dst.read_bytes() == b"map"
    assert os.listdir(tmp_path / "c") == ["k"]  # no temp files left behind


def test_close_closes_lab(fake_lab: ModuleType) -> None:
    env = make("dmlab:rooms_watermaze")
    env.close()
    assert fake_lab.instances[-1].closed


def test_dmlab30_levels_and_mapping() -> None:
    assert len(TRAIN_LEVELS) == 30 and len(set(TEST_LEVELS)) == 30
    assert LEVEL_MAPPING["rooms_collect_good_objects_train"] == "rooms_collect_good_objects_test"
    assert LEVEL_MAPPING["rooms_exploit_deferred_effects_train"] == (
        "rooms_exploit_deferred_effects_test"
    )
    assert sum(k != v for k, v in LEVEL_MAPPING.items()) == 2
    train, test = expand_levels("dmlab30"), expand_levels("dmlab30", test_mode=True)
    assert train[0] == "dmlab:rooms_collect_good_objects_train"
    assert test[0] == "dmlab:rooms_collect_good_objects_test"
    assert len(train) == len(test) == 30 and train[2:] == test[2:]
    prefixes = {level.split("_")[0] for level in TRAIN_LEVELS}
    assert prefixes == {"rooms", "language", "lasertag", "natlab", "skymaze", "psychlab", "explore"}


def test_make_rejects_dmlab30_as_single_env() -> None:
    with pytest.raises(ValueError, match="expand_levels"):
        make("dmlab30")
