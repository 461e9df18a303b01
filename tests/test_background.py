"""`--subtract-background`: each frame's most common byte put at 0 before the torso.

The level against a slow reference (numpy's bincount on the same pixels), the torso's input
against the formula, the no-op on black screens (exactly the plain torso), the real Atari
games' backgrounds (Pong's grey, Breakout's and SpaceInvaders' black), and the flag from
the command line to every agent, checked at the edge and on resume."""

import dataclasses

import numpy as np
import pytest
import torch

from gazelle.config import Config, ConfigError, resolve
from gazelle.models import build_agent
from gazelle.models.torsos import BACKGROUND_STRIDE, ShallowTorso, background_level


def reference_level(frames: np.ndarray) -> np.ndarray:
    """The mode of every channel of every frame on the strided grid, the smallest of ties."""
    out = np.zeros(frames.shape[:2], dtype=np.int64)
    for i, frame in enumerate(frames):
        for c, channel in enumerate(frame):
            sample = channel[::BACKGROUND_STRIDE, ::BACKGROUND_STRIDE].ravel()
            out[i, c] = np.bincount(sample, minlength=256).argmax()
    return out


def test_the_background_is_the_most_common_byte_of_each_channel():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (6, 4, 84, 84), dtype=np.uint8)
    frames[0] = 87  # one colour
    frames[1, -1] = 200
    frames[1, -1, :30] = 3  # 3 on fewer sampled pixels than 200
    frames[2, :-1] = 50  # each channel its own
    # a three-way tie on the grid: its 21 rows are 9, 4, 6, 9, 4, 6, ... (147 pixels each)
    grid_row = np.arange(84)[:, None] // BACKGROUND_STRIDE % 3
    frames[3, -1] = np.choose(np.broadcast_to(grid_row, (84, 84)), [9, 4, 6])
    frames[4, -1] = 0
    got = background_level(torch.from_numpy(frames)).numpy()
    assert got.shape == (6, 4)
    np.testing.assert_array_equal(got, reference_level(frames))
    assert list(got[0]) == [87] * 4 and got[1, -1] == 200 and list(got[2, :-1]) == [50] * 3
    assert got[3, -1] == 4 and got[4, -1] == 0  # ties: the smallest byte


def test_the_torso_sees_the_frame_minus_its_background_and_black_screens_unchanged():
    torch.manual_seed(0)
    plain = ShallowTorso((4, 84, 84))
    shifted = ShallowTorso((4, 84, 84))
    shifted.load_state_dict(plain.state_dict())
    shifted.subtract_background = True
    grey = torch.full((3, 4, 84, 84), 87, dtype=torch.uint8)
    grey[:, :, 40:44, 10:12] = 236  # a paddle
    want = (grey.float() - 87) / 255
    torch.testing.assert_close(shifted._image(grey), want)
    # an RGB screen: each colour channel's own background
    rgb = torch.empty((2, 3, 84, 84), dtype=torch.uint8)
    rgb[:, 0], rgb[:, 1], rgb[:, 2] = 144, 72, 17
    rgb[:, :, 10:14, 10:14] = 250
    colour = ShallowTorso((3, 84, 84))
    colour.subtract_background = True
    background = torch.tensor([144.0, 72.0, 17.0]).view(1, 3, 1, 1)
    torch.testing.assert_close(colour._image(rgb), (rgb.float() - background) / 255)
    torch.testing.assert_close(plain._image(grey), grey.float() / 255)
    black = torch.zeros((3, 4, 84, 84), dtype=torch.uint8)
    black[:, :, 20:24, 30:34] = 142
    for learning in (False, True):  # both memory formats (channels_last when learning)
        with torch.set_grad_enabled(learning):
            assert torch.equal(shifted(black), plain(black))
            assert not torch.allclose(shifted(grey), plain(grey))


@pytest.mark.parametrize("game, level", [("Pong", 87), ("Breakout", 0), ("SpaceInvaders", 0)])
def test_real_games_have_the_backgrounds_the_docs_name(game, level):
    """Pong's screen is grey, Breakout's and SpaceInvaders' black on every frame of random
    play (so the option changes nothing on those two)."""
    from gazelle.envs import make

    env = make(f"{game}NoFrameskip-v4", seed=1)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(1)
    frames = []
    for _ in range(400):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frames.append(obs["frame"])
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    levels = background_level(torch.from_numpy(np.stack(frames)))
    assert set(levels.flatten().tolist()) == {level}


def test_the_flag_reaches_every_agent_comes_from_the_preset_and_is_checked(tmp_path):
    from gazelle.algorithms.a3c.loop import a3c_agent, worker_specs
    from gazelle.algorithms.common import model_words, prepare
    from gazelle.algorithms.impala.build import actor_specs
    from gazelle.algorithms.preflight import check_torso
    from gazelle.envs.probe import probe
    from gazelle.runtime.actor import actor_agent

    catch = probe("gazelle/Catch-v0")
    assert resolve(Config.of(env="gazelle/Catch-v0"), catch).model.subtract_background is False
    # why: APPO's image preset norms its LSTM core's input, which the line names after.
    words = {
        "appo": "shallow subtract_background core_input_norm",
        "a3c": "universe subtract_background",
    }
    for algo, specs_of in (("appo", actor_specs), ("a3c", worker_specs)):
        config, found, _ = prepare(
            Config.of(algo=algo, env="gazelle/Catch-v0", num_actors=2, subtract_background=True)
        )
        assert model_words(config) == words[algo]
        specs = specs_of(config, found)
        assert [spec.agent_options["subtract_background"] for spec in specs] == [True, True]
        for agent in (actor_agent(specs[1]), a3c_agent(config, found.obs_spec)):
            assert agent.torso.subtract_background is True
        plain = dataclasses.replace(config, model=dataclasses.replace(
            config.model, subtract_background=False))  # fmt: skip
        assert not a3c_agent(plain, found.obs_spec).torso.subtract_background
    spec = found.obs_spec
    agent = build_agent(spec, "shallow", use_lstm=False, subtract_background=True)
    assert agent.torso.subtract_background
    # a torso of the user's that is not a gazelle Torso cannot take it: one clear line
    with pytest.raises(ConfigError, match="--subtract-background: invalid value True"):
        check_torso(
            Config.of(env="gazelle/Catch-v0", model="tests.test_api:TinyImageTorso",
                      subtract_background=True), spec,
        )  # fmt: skip
