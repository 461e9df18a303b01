"""Observations read as they are (`gazelle.envs.observations`): an image's layout from its
shape (or `--image-layout`), float images as images, a bare Text, Tuples and nested Dicts;
with real Gymnasium envs and wrappers where one exists, small Gymnasium envs elsewhere."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from gazelle.config import Config, ConfigError, validate
from gazelle.envs import make, obs_spec, observations
from gazelle.envs.adapter import GymAdapter
from gazelle.models import Agent
from gazelle.runtime.actor import ObsEncoder
from gazelle.types import DISCRETE, IMAGE, INSTRUCTION, TEXT, VECTOR


class Scripted(gymnasium.Env):
    """Shows `frames[k]` at step k (cycling); reward 1 per step; 3 actions; ends at 4 steps."""

    def __init__(self, space: spaces.Space, frames: list[Any] | None = None):
        self.observation_space, self.action_space = space, spaces.Discrete(3)
        self.frames = frames or [space.sample() for _ in range(4)]
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action: Any):
        self.t += 1
        return self.frames[self.t % len(self.frames)], 1.0, self.t >= 4, False, {}


@pytest.fixture
def warnings_said(monkeypatch, capsys):
    """`said()`: the `gazelle: warning:` lines printed since the test began (each warning is
    said once per process, so every test starts with none said)."""
    monkeypatch.setattr(observations, "_warned", set())

    def said() -> list[str]:
        err = capsys.readouterr().err
        return [line for line in err.splitlines() if line.startswith("gazelle: warning:")]

    return said


def _frame(env: gymnasium.Env) -> np.ndarray:
    return env.reset(seed=0)[0]["frame"]


def test_a_chw_image_is_read_as_chw(warnings_said):
    """3x64x48 CHW (a torchvision-style env): kept as it is, not read as 3 rows of 64
    pixels of 48 channels (`[48, 3, 64]`, what gazelle did before)."""
    image = np.random.default_rng(0).integers(0, 256, (3, 64, 48), dtype=np.uint8)
    env = GymAdapter(Scripted(spaces.Box(0, 255, (3, 64, 48), np.uint8), [image]))
    assert obs_spec(env).field("frame").shape == (3, 64, 48)
    np.testing.assert_array_equal(_frame(env), image)
    assert warnings_said() == []


def test_a_frame_key_in_hwc_is_moved_to_chw(warnings_said):
    """A Dict's `frame` is gazelle's own key, but an env may give it `[H, W, C]`: it is
    read by its shape like any image (before, it was taken as `[C, H, W]` unchecked)."""
    image = np.random.default_rng(1).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    space = spaces.Dict({"frame": spaces.Box(0, 255, (64, 48, 3), np.uint8)})
    env = GymAdapter(Scripted(space, [{"frame": image}]))
    assert obs_spec(env).field("frame").shape == (3, 64, 48)
    np.testing.assert_array_equal(_frame(env), image.transpose(2, 0, 1))
    assert warnings_said() == []


def test_a_real_env_gives_the_same_frames_in_either_layout(warnings_said):
    """Pong's raw RGB screen as the ALE gives it (`[210, 160, 3]`) and transposed to CHW by
    Gymnasium's own wrapper: gazelle stores the same `[3, 210, 160]` frames."""
    import ale_py

    gymnasium.register_envs(ale_py)
    hwc = gymnasium.make("ALE/Pong-v5")
    chw_space = spaces.Box(0, 255, (3, 210, 160), np.uint8)
    chw = gymnasium.wrappers.TransformObservation(
        gymnasium.make("ALE/Pong-v5"), lambda o: np.transpose(o, (2, 0, 1)), chw_space
    )
    frames = []
    for env in (GymAdapter(hwc), GymAdapter(chw)):
        assert obs_spec(env).field("frame").shape == (3, 210, 160)
        env.reset(seed=3)
        frames.append([env.step(a % 6)[0]["frame"] for a in range(5)])
        env.close()
    np.testing.assert_array_equal(np.stack(frames[0]), np.stack(frames[1]))
    assert np.stack(frames[0]).std() > 0  # a real picture, not a blank one
    assert warnings_said() == []


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((84, 84, 4), "hwc"), ((4, 84, 84), "chw"), ((7, 7, 3), "hwc"), ((3, 7, 7), "chw"),
        ((210, 160, 3), "hwc"), ((12, 64, 64), "chw"), ((64, 48, 1), "hwc"),
    ],
)  # fmt: skip
def test_the_layout_is_read_from_the_shape(shape, layout):
    assert observations.read_layout(shape, "auto", guess="hwc") == (layout, False)
    assert observations.read_layout(shape, "auto", guess="chw") == (layout, False)


@pytest.mark.parametrize("shape", [(8, 8, 8), (3, 5, 3), (64, 96, 128)])
def test_an_ambiguous_layout_is_a_guess_said_once(shape, warnings_said):
    """No axis (or both end axes) fits as the channels: a bare space is read as Gymnasium's
    `[H, W, C]`, a Dict's `frame` as gazelle's `[C, H, W]`, each said in one line naming
    the space and the flag; said once however many envs are made."""
    box = spaces.Box(0, 255, shape, np.uint8)
    a, b, c = shape
    for _ in range(3):
        env = GymAdapter(Scripted(box))
        assert obs_spec(env).field("frame").shape == (c, a, b)
    lines = warnings_said()
    assert len(lines) == 1, lines
    assert f"observation 'frame' {box}: its layout is ambiguous, read as [H, W, C]" in lines[0]
    assert "--image-layout hwc or chw" in lines[0]
    env = GymAdapter(Scripted(spaces.Dict({"frame": box})))
    assert obs_spec(env).field("frame").shape == shape
    assert "read as [C, H, W]" in warnings_said()[0]


def test_actor_processes_leave_the_warning_to_the_run(warnings_said, monkeypatch):
    """An actor (a `multiprocessing` child) makes its envs after the run's own process has
    probed the env and said the warning: 16 actors do not say it 16 times more."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    GymAdapter(Scripted(spaces.Box(0, 255, (8, 8, 8), np.uint8)))
    assert warnings_said() == []


def test_the_layout_flag_is_obeyed_without_a_warning(warnings_said):
    box = spaces.Box(0, 255, (8, 8, 8), np.uint8)
    image = np.arange(512, dtype=np.uint8).reshape(8, 8, 8)
    as_chw = GymAdapter(Scripted(box, [image]), image_layout="chw")
    np.testing.assert_array_equal(_frame(as_chw), image)
    as_hwc = GymAdapter(Scripted(box, [image]), image_layout="hwc")
    np.testing.assert_array_equal(_frame(as_hwc), image.transpose(2, 0, 1))
    # told, even where the shape says otherwise: the user knows their env
    told = GymAdapter(Scripted(spaces.Box(0, 255, (3, 64, 48), np.uint8)), image_layout="hwc")
    assert obs_spec(told).field("frame").shape == (48, 3, 64)
    assert warnings_said() == []
    with pytest.raises(ValueError, match="image_layout: invalid value 'whc'; allowed: auto"):
        GymAdapter(Scripted(box), image_layout="whc")


def test_the_flag_reaches_make_from_the_config_and_is_checked(tmp_path):
    from gazelle.algorithms.common import env_kwargs, prepare

    assert "image_layout" not in env_kwargs(Config.of(env="CartPole-v1"))
    assert env_kwargs(Config.of(env="CartPole-v1", image_layout="chw"))["image_layout"] == "chw"
    with pytest.raises(ConfigError, match="--image-layout: invalid value 'CHW'; allowed: auto"):
        validate(Config.of(env="CartPole-v1", image_layout="CHW"))
    with pytest.raises(ValueError, match=r"image_layout: auto with ALE/Pong-v5 \(its frames are"):
        make("ALE/Pong-v5", image_layout="hwc")
    with pytest.raises(ConfigError, match=r"--image-layout: invalid value 'chw'; allowed: auto"):
        prepare(Config.of(env="ALE/Pong-v5", image_layout="chw", logdir=str(tmp_path)))
    raw = make("ALE/Pong-v5", preset="raw", image_layout="hwc")
    assert obs_spec(raw).field("frame").shape == (3, 210, 160)


def test_a_stack_of_frames_becomes_channels():
    """Gymnasium's FrameStackObservation on an RGB env gives `[S, H, W, C]`: its frames'
    channels, frame by frame, become the image's `S * C` channels."""
    inner = Scripted(spaces.Box(0, 255, (10, 12, 3), np.uint8))
    stacked = gymnasium.wrappers.FrameStackObservation(inner, 4)
    env = GymAdapter(stacked)
    assert obs_spec(env).field("frame").shape == (12, 10, 12)
    env.reset(seed=0)
    frame = env.step(0)[0]["frame"]
    native = stacked.unwrapped.frames  # frames 0 (reset) and 1 (first step) were shown
    np.testing.assert_array_equal(frame[9:12], native[1].transpose(2, 0, 1))  # newest last
    np.testing.assert_array_equal(frame[6:9], native[0].transpose(2, 0, 1))


def test_a_float_image_is_an_image_in_bytes(warnings_said):
    """A float32 `[H, W, C]` image in [0, 1] (what Gymnasium's RescaleObservation makes
    of a screen) is an image `[C, H, W]` of the same bytes, for the conv torso; before, a
    flattened 100,800-long vector."""
    import ale_py

    gymnasium.register_envs(ale_py)
    floats = gymnasium.wrappers.RescaleObservation(
        gymnasium.wrappers.DtypeObservation(gymnasium.make("ALE/Pong-v5"), np.float32),
        np.float32(0.0),
        np.float32(1.0),
    )
    env, plain = GymAdapter(floats), GymAdapter(gymnasium.make("ALE/Pong-v5"))
    field = obs_spec(env).field("frame")
    assert (field.kind, field.shape, field.dtype) == (IMAGE, (3, 210, 160), np.uint8)
    np.testing.assert_array_equal(env.reset(seed=5)[0]["frame"], plain.reset(seed=5)[0]["frame"])
    agent = Agent(obs_spec(env), torso="shallow")
    assert type(agent.torso).__name__ == "ShallowTorso"
    assert warnings_said() == []


def test_float_pixels_are_mapped_from_their_bounds():
    """Bounds [-1, 1] onto 0..255: rounded, values outside clipped, NaN as 0; per-pixel
    bounds each by their own; a 64-bit image too."""
    box = spaces.Box(-1.0, 1.0, (2, 5, 6), np.float32)
    pixels = np.zeros((2, 5, 6), np.float32)
    pixels[0, 0, :4] = [-1.0, 0.0, 1.0, 0.5]
    pixels[0, 1, :3] = [-3.0, 7.0, np.nan]
    env = GymAdapter(Scripted(box, [pixels]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # why: a NaN cast to bytes as it is is undefined
        frame = _frame(env)
    assert frame.dtype == np.uint8 and frame.shape == (2, 5, 6)
    assert frame[0, 0, :4].tolist() == [0, 128, 255, 191]  # 127.5 rounds to even: 128
    assert frame[0, 1, :3].tolist() == [0, 255, 0]
    low = np.zeros((4, 5, 3))
    high = np.full((4, 5, 3), 255.0)
    high[..., 1] = 10.0  # channel 1 counts 0..10
    box64 = spaces.Box(low, high, (4, 5, 3), np.float64)
    image = np.full((4, 5, 3), 5.0)
    frame = _frame(GymAdapter(Scripted(box64, [image])))
    assert frame[:, 0, 0].tolist() == [5, 128, 5]


def test_a_float_image_without_bounds_is_a_vector_said_once(warnings_said):
    box = spaces.Box(-np.inf, np.inf, (3, 64, 48), np.float32)
    env = GymAdapter(Scripted(box))
    assert obs_spec(env).field("frame").kind == VECTOR
    assert obs_spec(env).field("frame").shape == (3 * 64 * 48,)
    (line,) = warnings_said()
    assert "not read as an image (an infinite bound cannot be scaled to bytes)" in line


def test_a_matrix_of_floats_stays_a_vector(warnings_said):
    """Rank 2 and float: a table of numbers as often as a picture, so a vector (a uint8
    one is a grey image)."""
    env = GymAdapter(Scripted(spaces.Box(0.0, 1.0, (6, 5), np.float32)))
    assert obs_spec(env).field("frame").shape == (30,)
    assert warnings_said() == []


class TextBandit(gymnasium.Env):
    """A bare Text observation naming the action that pays 1 ("press 0" .. "press 2")."""

    def __init__(self):
        self.observation_space, self.action_space = spaces.Text(16), spaces.Discrete(3)
        self.target = 0

    def _obs(self) -> str:
        self.target = int(self.np_random.integers(3))
        return f"press {self.target}"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any):
        reward = float(int(action) == self.target)
        return self._obs(), reward, True, False, {}


def test_a_bare_text_observation_is_the_instruction():
    """A bare Text was refused with a message that said Text was accepted; it is the
    `instruction` text field, encoded by the instruction encoder."""
    env = GymAdapter(TextBandit())
    spec = obs_spec(env)
    assert [(f.name, f.kind) for f in spec.fields] == [(INSTRUCTION, TEXT)]
    obs, _ = env.reset(seed=0)
    assert obs == {INSTRUCTION: f"press {env.unwrapped.target}"}
    agent = Agent(spec, torso="mlp")
    assert agent.torso is None and agent.instruction is not None
    encoded = ObsEncoder(spec)({INSTRUCTION: [obs[INSTRUCTION]]})
    state = agent.initial_state(1)
    zeros = torch.zeros(1, dtype=torch.long), torch.zeros(1), torch.ones(1, dtype=torch.bool)
    out, _ = agent.act(encoded, *zeros, state)
    assert out.policy_logits.shape == (1, 3)


@pytest.mark.slow
def test_a_bare_text_env_trains(small_config):
    """`gazelle train` on an env whose whole observation is a Text: probed, acted on by the
    actor processes, trained on and saved: an agent of an instruction encoder and no torso."""
    import gazelle
    from gazelle import checkpoint
    from gazelle.algorithms.impala import train

    gazelle.register_env("ObsTextBandit-v0", TextBandit)
    config = small_config(env="ObsTextBandit-v0", total_frames=1_000)
    result = train(config)
    assert result.frames >= 1_000 and result.episodes > 100  # one-step episodes
    saved = checkpoint.load(Path(config.run.logdir) / "checkpoint.pt")
    modules = {name.split(".")[0] for name in saved["agent"]}
    assert "instruction" in modules and "torso" not in modules


def test_a_tuple_is_a_dict_of_its_members():
    """Blackjack's Tuple(Discrete(32), Discrete(11), Discrete(2)): keys 0, 1, 2, each an
    index (before: refused)."""
    env = make("Blackjack-v1", seed=0)
    spec = obs_spec(env)
    assert [(f.name, f.kind, f.sizes) for f in spec.fields] == [
        ("0", DISCRETE, (32,)), ("1", DISCRETE, (11,)), ("2", DISCRETE, (2,)),
    ]  # fmt: skip
    obs, _ = env.reset()
    native = env.unwrapped._get_obs()
    assert [int(obs[k][0]) for k in "012"] == [int(v) for v in native]


def test_a_nested_dict_is_flattened_into_keys():
    camera = spaces.Box(0, 255, (3, 16, 16), np.uint8)
    space = spaces.Dict(
        {
            "arm": spaces.Dict({"pos": spaces.Box(-1, 1, (3,)), "camera": camera}),
            "goal": spaces.Tuple([spaces.Discrete(4), spaces.Text(8)]),
        }
    )
    env = GymAdapter(Scripted(space))
    kinds = {f.name: (f.kind, f.shape) for f in obs_spec(env).fields}
    assert kinds == {
        "arm_pos": (VECTOR, (3,)),
        "arm_camera": (IMAGE, (3, 16, 16)),
        "goal_0": (DISCRETE, (1,)),
        "goal_1": (TEXT, (32,)),
    }
    native = env.unwrapped.frames[0]
    obs = env.reset(seed=0)[0]
    np.testing.assert_array_equal(obs["arm_camera"], native["arm"]["camera"])
    assert obs["goal_1"] == native["goal"][1]
    clash = spaces.Dict({"a_b": spaces.Discrete(2), "a": spaces.Dict({"b": spaces.Discrete(2)})})
    with pytest.raises(ValueError, match="clash once renamed"):
        GymAdapter(Scripted(clash))


def test_the_families_raw_images_need_no_guess(warnings_said):
    """MiniGrid's 7x7x3 and the ALE's 210x160x3 through the generic path: read, not
    guessed."""
    minigrid = make("MiniGrid-Empty-5x5-v0", preset="raw")
    assert obs_spec(minigrid).field("image").shape == (3, 7, 7)
    atari = make("ALE/Pong-v5", preset="raw")
    assert obs_spec(atari).field("frame").shape == (3, 210, 160)
    assert warnings_said() == []
