"""The data contracts shared by envs, models, losses and the runtime.

Everything is **time-major**: an unroll holds `[T+1, B, ...]` tensors, a learner batch the
same with `B` unrolls side by side. Index `k` of an unroll follows the IMPALA seed's actor:

- the env fields at `k` (reward, terminated, truncated, observation, episode info) are the
  env's output `o_k`;
- the agent fields at `k` (action, policy logits, baseline) are the agent's output that *led
  to* `o_k`, i.e. the output computed from `o_{k-1}`.

Step 0 of an unroll repeats the last step of the previous one, so the learner can rebuild the
agent's inputs for every step and shifts by one (see `gazelle.runtime.learner`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # why: envs import this module in every actor process; torch costs ~1.5 s
    import torch

#: Keys of an observation dict. `frame` is always present; `instruction` only for tasks that
#: have a text instruction (BabyAI, DMLab language levels, the instruction diagnostic task).
FRAME = "frame"
INSTRUCTION = "instruction"

#: LSTM state as `(h, c)`, each `[B, H]`; an empty tuple for a feed-forward agent.
AgentState = tuple["torch.Tensor", ...]


@dataclass(frozen=True)
class ObsSpec:
    """What an agent needs to know about an env's observations and actions.

    Attributes:
        frame_shape: shape of one frame: `(C, H, W)` for images, `(D,)` for vectors.
        frame_dtype: `uint8` for images (scaled to [0, 1] inside the model), `float32` for
            vectors.
        num_actions: size of the discrete action set (indices `0..num_actions-1`).
        has_instruction: whether observations carry an `instruction` text.
    """

    frame_shape: tuple[int, ...]
    frame_dtype: np.dtype
    num_actions: int
    has_instruction: bool = False

    @property
    def is_image(self) -> bool:
        return len(self.frame_shape) == 3


class AgentOutput(NamedTuple):
    """One agent output, per step `[B, ...]` or per unroll `[T, B, ...]`.

    Attributes:
        action: sampled (or greedy) action index, int64 `[..]`.
        policy_logits: unnormalised log-probabilities, float `[.., A]`.
        baseline: state-value estimate, float `[..]`.
    """

    action: torch.Tensor
    policy_logits: torch.Tensor
    baseline: torch.Tensor


class StepOutput(NamedTuple):
    """What the env gives the agent at one step, batched `[B, ...]` or `[T, B, ...]`.

    Attributes:
        reward: raw reward of the transition that led here (not clipped), float32.
        terminated: the episode ended in a terminal state at this step (no bootstrap).
        truncated: the episode was cut at this step (time limit): bootstrap from its last
            observation's value.
        observation: dict with `frame` and optionally `instruction` (hashed token ids, int64
            `[.., L]`, 0 = padding; see `gazelle.models.instruction`).
        episode_return: return of the episode so far; on the step that ends a game, the
            whole game's return.
        episode_length: agent steps of the episode so far.
    """

    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    observation: dict[str, torch.Tensor]
    episode_return: torch.Tensor
    episode_length: torch.Tensor

    @property
    def done(self) -> torch.Tensor:
        """Either end: the LSTM state resets on both."""
        return self.terminated | self.truncated
