"""Episode videos: the recorder keeps the right frames, GIFs hold them, test mode writes them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from gazelle.envs import make
from gazelle.evaluation import evaluate
from gazelle.video import EpisodeRecorder, clip_name, save_gif


class FakeRenderEnv:
    """Renders a frame whose pixels hold a counter, so frames can be told apart."""

    render_mode = "rgb_array"

    def __init__(self) -> None:
        self.count = 0

    def render(self) -> np.ndarray:
        self.count += 1
        return np.full((4, 6, 3), self.count, dtype=np.uint8)


def test_recorder_keeps_frames_of_the_first_episodes_up_to_the_cap():
    env = FakeRenderEnv()
    recorder = EpisodeRecorder(env, episodes=2, max_frames=3)
    for episode in (0, 0, 1, 1, 1, 1, 2):
        recorder.frame(episode)
    assert [[int(f[0, 0, 0]) for f in clip] for clip in recorder.clips] == [[1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="rgb_array"):
        EpisodeRecorder(object(), episodes=1)


def playing_time_ms(gif: Image.Image) -> int:
    total = 0
    for index in range(gif.n_frames):
        gif.seek(index)
        total += gif.info["duration"]
    return total


def test_gif_holds_every_frame_at_the_given_speed(tmp_path):
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (20, 30, 3), dtype=np.uint8) for _ in range(5)]
    path = save_gif(frames, tmp_path / "sub" / "clip.gif", fps=10)
    with Image.open(path) as gif:
        assert gif.size == (30, 20) and gif.n_frames == 5 and gif.info["loop"] == 0
        assert playing_time_ms(gif) == 500
    frames[2] = frames[1]  # a repeated frame is merged, and shown twice as long
    with Image.open(save_gif(frames, tmp_path / "repeat.gif", fps=10)) as gif:
        assert gif.n_frames == 4 and playing_time_ms(gif) == 500
    with pytest.raises(ValueError, match="no frames"):
        save_gif([], tmp_path / "empty.gif", fps=10)


def test_clip_names_are_safe_file_names():
    assert clip_name("ALE/Pong-v5", 0) == "ALE_Pong-v5-0.gif"
    assert clip_name("dmlab:rooms_watermaze", 3) == "dmlab_rooms_watermaze-3.gif"


def test_atari_frames_are_the_colour_screen():
    env = make("ALE/Pong-v5", seed=0, render_mode="rgb_array")
    recorder = EpisodeRecorder(env, episodes=1)
    env.reset(seed=0)
    recorder.frame(0)
    env.step(0)
    recorder.frame(0)
    env.close()
    assert [f.shape for f in recorder.clips[0]] == [(210, 160, 3)] * 2
    assert recorder.clips[0][0].std() > 0  # a real screen, not a blank one


@pytest.mark.slow
def test_test_mode_records_one_gif_per_episode(tmp_path):
    from gazelle.algorithms.impala import train
    from gazelle.config import Config

    train(
        Config.of(
            env="CartPole-v1",
            num_actors=1,
            envs_per_actor=2,
            batch_size=2,
            unroll_length=10,
            total_frames=200,
            checkpoint_interval_s=1000.0,
            logdir=str(tmp_path),
        )
    )
    results = evaluate(tmp_path, episodes=3, video=2, verbose=False)
    level = results["levels"]["CartPole-v1"]
    assert level["videos"] == ["videos/CartPole-v1-0.gif", "videos/CartPole-v1-1.gif"]
    for path, episode_return in zip(level["videos"], level["returns"]):
        with Image.open(tmp_path / path) as gif:
            # the reset frame plus one per step (CartPole pays 1 per step), at 50 fps
            assert gif.size == (600, 400)
            assert playing_time_ms(gif) == 20 * (int(episode_return) + 1)
    saved = json.loads((tmp_path / "test_results.json").read_text())
    assert saved["levels"]["CartPole-v1"]["videos"] == level["videos"]


def test_video_of_an_env_that_cannot_render_is_a_clear_error(tmp_path, capsys):
    from gazelle.cli import main

    ckpt_dir = tmp_path / "run"
    ckpt_dir.mkdir()
    from gazelle import checkpoint
    from gazelle.config import Config
    from gazelle.envs import obs_spec
    from gazelle.models import Agent

    config = Config.of(env="gazelle/Memory-v0", model="mlp")
    env = make("gazelle/Memory-v0", seed=0)
    agent = Agent(obs_spec(env), torso="mlp")
    env.close()
    checkpoint.save(
        ckpt_dir / "checkpoint.pt",
        {"agent": agent.state_dict(), "config": config.to_dict(), "frames": 0},
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--logdir", str(ckpt_dir), "--episodes", "1", "--video", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--video: gazelle/Memory-v0 cannot render frames" in err
    assert "Traceback" not in err
