"""The memory check (`gazelle.runtime.memory_check`): a task whose reward depends on an
earlier observation is found to need memory; one whose reward depends on the present
observation and action only is not. Synthetic batches of the unroll contract, no env."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from gazelle.envs.spaces import obs_spec_of
from gazelle.runtime.memory_check import TARGETS, MemoryCheck, readable
from gazelle.types import ObsSpec, image_field

T, B = 20, 16


def batches(cue_delay: int | None, seed: int = 0):
    """Endless `[T+1, B]` batches of a 2-action task with episodes of 8 steps. The frame is
    `(x, cue, k / 8)`: `x` random each step; `cue` random +-1 on an episode's first step, 0
    after; `k` the step in the episode (so its end is no hidden clock).
    The reward after action `a` on step `k` of an episode: with `cue_delay` None, `x * (1 -
    2a)` (the present decides it: Markov); with `cue_delay` d, at step d only, `cue_0 * (1 -
    2a)` (the cue shown d steps earlier decides it), else 0."""
    gen = torch.Generator().manual_seed(seed)
    length = 8
    step = torch.randint(length, (B,), generator=gen)
    cue = torch.where(torch.rand(B, generator=gen) < 0.5, -1.0, 1.0)
    prev = {
        "frame": torch.zeros(B, 3),
        "reward": torch.zeros(B),
        "terminated": torch.ones(B, dtype=torch.bool),
        "action": torch.zeros(B, dtype=torch.int64),
    }
    while True:
        rows = [prev]
        for _ in range(T):
            obs = prev["frame"]
            action = torch.randint(2, (B,), generator=gen)
            sign = 1.0 - 2.0 * action.float()
            if cue_delay is None:
                reward = obs[:, 0] * sign
            else:
                reward = torch.where(step == cue_delay, cue * sign, torch.zeros(B))
            ended = step == length - 1
            step = torch.where(ended, torch.zeros_like(step), step + 1)
            cue = torch.where(
                ended, torch.where(torch.rand(B, generator=gen) < 0.5, -1.0, 1.0), cue
            )
            x = torch.rand(B, generator=gen) * 2 - 1
            frame = torch.stack([x, cue * (step == 0), step / length], -1)
            prev = {"frame": frame, "reward": reward, "terminated": ended, "action": action}
            rows.append(prev)
        batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
        batch["truncated"] = torch.zeros_like(batch["terminated"])
        yield batch


def run_check(cue_delay: int | None, count: int = 260) -> tuple[MemoryCheck, list[str]]:
    said: list[str] = []
    check = MemoryCheck(ObsSpec((3,), None, 2), warn=said.append, warmup=150, window=count)
    for batch, _ in zip(batches(cue_delay), range(count)):
        check.observe(batch)
    return check, said


def test_a_reward_decided_by_an_earlier_cue_is_found_to_need_memory():
    check, said = run_check(cue_delay=5)
    reward = TARGETS.index("reward")
    assert check.needs_memory() and reward in check.needing(), (check.gains(), check.shares())
    assert len(said) == 1 and "--use-lstm" in said[0] and "the reward" in said[0]
    assert not check.active  # a verdict ends the check


def test_a_reward_decided_by_the_present_is_not():
    check, said = run_check(cue_delay=None)
    assert not check.needs_memory() and not said, (check.gains(), check.shares())
    assert max(check.gains()) < 0.03
    assert not check.active  # its window is spent


def test_only_vector_and_discrete_fields_are_read():
    assert readable(ObsSpec((4,), None, 2))
    assert not readable(ObsSpec(fields=(image_field("frame", (1, 8, 8)),), num_actions=2))


def test_only_one_set_of_discrete_actions_is_read():
    """Its predictors take the action as a one-hot: a Box (MuJoCo) or a composite action is
    not checked (it raised on `num_actions` at a run's first batch)."""
    box = spaces.Box(-1, 1, (2,), np.float32)
    vector = spaces.Dict({"frame": spaces.Box(-1, 1, (4,), np.float32)})
    assert readable(obs_spec_of(vector, spaces.Discrete(3)))
    assert not readable(obs_spec_of(vector, box))
    assert not readable(obs_spec_of(vector, spaces.Tuple([spaces.Discrete(3), box])))
    assert not readable(obs_spec_of(vector, spaces.MultiBinary(3)))
