"""Learning tests: real runs (real actor processes, real envs) that must reach a return.

Each asserts a threshold on the mean return of the last 100 episodes of a real run. Measured
on the 2-core CI machine: CartPole ~1 minute, each diagnostic run well under a minute.
"""

import json

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from gazelle.algorithms import a3c
from gazelle.algorithms.impala import train
from gazelle.config import Config
from gazelle.envs import make, obs_spec

pytestmark = [pytest.mark.learning, pytest.mark.slow]


def run(tmp_path, **overrides):
    config = Config.of(logdir=str(tmp_path), log_interval_s=10.0, seed=1, **overrides)
    return train(config)


def episode_returns(logdir, after_frames):
    """Every episode's return logged after `after_frames` frames (TensorBoard, in order)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars("charts/episode_return") if e.step > after_frames]


def test_cartpole_reaches_450_without_collapsing_on_the_way(tmp_path, capfd):
    """The default command's curve climbs: after the first 100K frames, episodes shorter
    than random play's (~22 steps) stay rare. With the LSTM the vector preset had, 43-49% of
    them were (the policy fell to pushing one way for hundreds of episodes, again and again);
    without it 5% (docs/results.md, "CartPole: the saw and its cause"). And the memoryless
    default's memory check (`gazelle.runtime.memory_check`) ran and said nothing: CartPole
    is Markov in its observation (tests/test_memory_warning.py: a memory task is named)."""
    result = run(tmp_path, env="CartPole-v1", total_frames=1_000_000)  # the preset's budget
    assert result.recent_return is not None and result.recent_return >= 450, result
    later = episode_returns(tmp_path, after_frames=100_000)
    below_random = sum(value < 25 for value in later) / len(later)
    assert below_random <= 0.15, (below_random, len(later))
    out = capfd.readouterr()
    assert "seems to need memory" not in out.out + out.err
    # why: silence proves nothing unless the check ran: its verdict is in the progress rows.
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").open()]
    verdicts = [row["memory/needed"] for row in rows if "memory/needed" in row]
    assert verdicts and not any(verdicts), verdicts


def test_memory_task_is_solved_with_the_lstm_across_unrolls(tmp_path):
    # Cue at the first step, answer up to 30 steps later: a third of the episodes are longer
    # than the unroll (20), so a mean return >= 0.9 needs the LSTM state carried across
    # unrolls (those episodes alone would cap a memoryless agent at about 0.67). The run
    # must still be solving it at its end: the collapse seen before (solved, then back to
    # chance) must not come back (docs/results.md). It is first solved at ~40-60K frames
    # (two runs), so 400K frames keeps ~7x that for a collapse to show.
    result = run(
        tmp_path, env="gazelle/Memory-v0", use_lstm=True, unroll_length=20, total_frames=400_000
    )
    assert result.recent_return is not None and result.recent_return >= 0.9, result


def test_instruction_task_is_solved_with_the_encoder(tmp_path):
    # Within 60K frames; the run stops once solved (`target_return`).
    result = run(tmp_path, env="gazelle/Instruction-v0", total_frames=60_000, target_return=0.9)
    assert result.target_reached_at is not None, result  # a full window's mean of 0.9


def test_instruction_task_is_not_solved_without_the_encoder(tmp_path):
    # Same frames, instruction withheld: one of 4 items at chance, 0.25.
    result = run(tmp_path, env="gazelle/Instruction-v0", use_instruction=False, total_frames=60_000)
    assert result.recent_return is not None and result.recent_return <= 0.4, result


#: A contextual bandit through Gymnasium's own Dict spaces (gazelle/DictObs-v0): random
#: pixels, a random position, a fixed mission text, and `target` (a Discrete) saying which
#: of 4 actions pays 1, for 8 steps. Settings for a ~15 s run: 16 envs, B=8, T=8, Adam 3e-3,
#: no LSTM (nothing to remember). Measured: 6.4 of 8 at 12K frames (seeds 1, 2), ~25 s
#: each; with `target` withheld (or its embedding zeroed) 2.0.
DICT_OBS = dict(
    env="gazelle/DictObs-v0", total_frames=12_000, envs_per_actor=16, batch_size=8,
    unroll_length=8, optimizer="adam", learning_rate=0.003, epsilon=1e-8, use_lstm=False,
)  # fmt: skip


def test_dict_task_is_solved_by_reading_its_discrete_key(tmp_path):
    result = run(tmp_path, **DICT_OBS)
    assert result.recent_return is not None and result.recent_return >= 5.0, result


def test_dict_task_stays_at_chance_with_its_discrete_key_withheld(tmp_path):
    # Same run, `target` withheld (the image, vector and text keys are still read): the
    # best a policy can do is chance, 8 / 4 = 2 (a 100-episode mean has sd ~0.12).
    result = run(tmp_path, withhold_obs="target", **DICT_OBS)
    assert result.recent_return is not None and result.recent_return <= 2.6, result


def atari_defaults() -> dict:
    """The IMPALA settings gazelle gives an Atari game (its preset), for a non-Atari task."""
    from gazelle.algorithms.impala.presets import IMPALA_PRESETS

    preset = IMPALA_PRESETS["gazelle"]["atari"]
    keys = ("batch_size", "unroll_length", "optimizer", "learning_rate", "epsilon",
            "entropy_cost", "use_lstm", "envs_per_actor", "subtract_background")  # fmt: skip
    return {key: preset[key] for key in keys}


def test_pixel_catch_is_learned_from_a_small_ball_with_the_atari_defaults(tmp_path):
    """A 2x2-pixel ball falls in an 84x84 frame of Pong's grey; only the frame says where,
    and the reward (+1 caught, -1 missed) comes once per 7 steps: Pong's difficulty in
    small. A policy that ignores the frame cannot beat -0.6 (gazelle/Catch-v0's docstring).
    With the Atari preset (shallow torso, B=8, Adam, the grey background put at 0) the
    100-episode mean first reaches 0.5 at ~21K frames here; with the background left grey
    (the preset before 2026-12-05) at 139-178K frames, so it fails this 60K budget
    (docs/results.md, "The background at 0"); with the IMPALA paper's settings (B=32, TF
    RMSProp at epsilon 0.01, LSTM) it stayed at chance for 360K. The run stops once the mean
    reaches 0.5 (`target_return`)."""
    config = {**atari_defaults(), "envs_per_actor": 16, "target_return": 0.5}
    assert config["subtract_background"] is True
    result = run(tmp_path, env="gazelle/Catch-v0", model="shallow", total_frames=60_000, **config)
    assert result.target_reached_at is not None, result  # a full window's mean of 0.5


def catch_chw() -> gymnasium.Env:
    """gazelle/Catch-v0's frame as a bare `[3, 84, 84]` uint8 Box (torchvision's layout)."""
    from gazelle.envs.catch import CatchEnv

    space = spaces.Box(0, 255, (3, 84, 84), np.uint8)
    return gymnasium.wrappers.TransformObservation(
        CatchEnv(), lambda o: np.repeat(o["frame"], 3, axis=0), space
    )


def catch_float_hwc() -> gymnasium.Env:
    """gazelle/Catch-v0's frame as a bare `[84, 84, 1]` float32 Box in [0, 1]."""
    from gazelle.envs.catch import CatchEnv

    space = spaces.Box(0.0, 1.0, (84, 84, 1), np.float32)
    return gymnasium.wrappers.TransformObservation(
        CatchEnv(), lambda o: o["frame"].transpose(1, 2, 0).astype(np.float32) / 255.0, space
    )


@pytest.mark.parametrize("maker", [catch_chw, catch_float_hwc])
def test_pixel_catch_is_learned_from_a_chw_or_float_image(tmp_path, maker):
    """The Catch test's task and settings through the generic adapter, as a user's env
    gives its frames: CHW bytes (read before as 3 rows of 84 channels) and HWC floats in
    [0, 1] (flattened before into a 7,056-long vector for the mlp torso). Both reach the
    conv torso that `--model auto` picks for images, and learn: the 100-episode mean reaches
    0.5 (a policy blind to the frame: -0.6)."""
    import gazelle

    name = f"ObsCatch{maker.__name__.title().replace('_', '')}-v0"
    gazelle.register_env(name, maker)
    assert obs_spec(make(name)).frame_shape[1:] == (84, 84)  # an image, rows and columns
    config = {**atari_defaults(), "envs_per_actor": 16, "target_return": 0.5}
    result = run(tmp_path, env=name, total_frames=60_000, **config)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model"]["torso"] == "shallow"
    assert result.target_reached_at is not None, result  # a full window's mean of 0.5


# A3C: the vector preset (2 workers x 4 envs, Adam 5e-4 decayed linearly, the seed's loss).


def run_a3c(tmp_path, **overrides):
    config = Config.of(algo="a3c", logdir=str(tmp_path), log_interval_s=10.0, seed=1, **overrides)
    return a3c.train(config)


def test_a3c_cartpole_learns(tmp_path):
    """Issue 12's threshold within 1M frames (the preset's budget is 1.5M; 1M keeps CI short,
    and the learning rate decays to 0 over the 1M); the run stops once the 100-episode mean
    reaches 450 (`target_return`). The vector preset (no LSTM, lr 2e-3, no clip) reached 450
    at 344-498K frames over 3 seeds and never fell by more than ~30; with the seed's LSTM at
    lr 5e-4 (the preset before) at 434-574K, and one run in three collapsed (480 -> 61 after
    450; this test failed once in CI on such a collapse, 386 -> 56 at 436K). With the seed's
    clip at 40: 374-399 at 1M (docs/results.md, "A3C on vector tasks")."""
    result = run_a3c(tmp_path, env="CartPole-v1", total_frames=1_000_000, target_return=450.0)
    assert result.target_reached_at is not None, result  # a full window's mean of 450
    # why: worker 0 tests the task for memory (gazelle.algorithms.a3c.memory): CartPole is
    # Markov, so its rows carry the test and no verdict
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").open()]
    needed = [row["memory/needed"] for row in rows if "memory/needed" in row]
    assert needed and max(needed) == 0.0, needed


def test_a3c_memory_task_is_solved_with_several_workers(tmp_path):
    """Two workers share the global network; the cue comes 1-30 steps before the answer,
    so the LSTM state must be carried across the 20-step partial rollouts. Within 150K
    frames; the run stops once solved (`target_return`). The vector preset has no LSTM (the
    task is unsolvable without one: 0.00 at 100K), so the test asks for it as a user would."""
    result = run_a3c(
        tmp_path, env="gazelle/Memory-v0", num_actors=2, total_frames=150_000,
        target_return=0.9, use_lstm=True,
    )  # fmt: skip
    # why: not `recent_return`, which also counts the episodes that end while the workers stop
    # (it read 0.88 once after the window had reached 0.9).
    assert result.target_reached_at is not None, result


# Continuous actions: the Gaussian head end to end (log-probabilities, the learned log-std,
# the samples brought onto the Box's bounds) on gazelle/Reach-v0: put a point on a target
# drawn inside a Box of bounds (-3, 0.5)..(1, 4.5), reward minus the distance (a fraction of
# the range, per step). Ignoring the target gives -0.25; aiming at it with the initial std
# (half the range) -0.28; actions that stop at [-1, 1] instead of reaching the bounds at best
# -0.25; -0.1 needs the mean on the target and the std learned down to a quarter of it.
# APPO at small batches and a high learning rate (one actor of 16 envs, B=8, T=8, Adam
# 3e-3, no entropy bonus), every setting explicit (a family's preset may change), stopping
# once the 100-episode mean reaches -0.1 (`target_return`). Measured: -0.1 in 27.6 s; with
# the Gaussian's log-probability sign flipped -0.75 at 80K frames, with the log-std frozen
# at its start -0.20, with the samples not brought onto the bounds -0.28
# (docs/notes/continuous.md).
REACH = dict(
    env="gazelle/Reach-v0", algo="appo", total_frames=80_000, num_actors=1, envs_per_actor=16,
    batch_size=8, unroll_length=8, optimizer="adam", learning_rate=0.003, epsilon=1e-8,
    entropy_cost=0.0, epochs=2, minibatches=2, clip_ratio=0.1, clip_anchor="behaviour",
    normalize_advantages=True, vtrace_lambda=0.95, popart=False, reward_clipping="none",
    use_lstm=False, normalize_obs=False, separate_value=False, log_std="parameter",
    initial_log_std=0.0, action_bounds="clip", slots_per_env=2, target_return=-0.1,
)  # fmt: skip


def test_reach_is_learned_with_continuous_actions_onto_the_box_bounds(tmp_path):
    from gazelle.algorithms import train as train_any

    config = Config.of(logdir=str(tmp_path), log_interval_s=2.0, seed=1, **REACH)
    result = train_any(config)
    assert result.target_reached_at is not None, result  # a full window's mean of -0.1
