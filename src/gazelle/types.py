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

from gazelle.actions import ActionSpec

if TYPE_CHECKING:  # why: envs import this module in every actor process; torch costs ~1.5 s
    import torch

#: Keys of an observation dict with a meaning of their own. `frame` is the env's screen (or
#: its vector observation) and is encoded by the `--model` torso; `instruction` is a text
#: instruction (BabyAI, DMLab language levels, the instruction diagnostic task). Any other
#: key of a Dict observation is a field of its own (`ObsField`).
FRAME = "frame"
INSTRUCTION = "instruction"

#: What an observation field holds, one step of one env:
#: image: uint8 `[C, H, W]` (scaled to [0, 1] inside the model); every image is stored so,
#:     whatever the env gives: the adapter moves an `[H, W, C]` layout's channels first and
#:     quantises float pixels onto 0..255 from their Box bounds (`gazelle.envs.observations`);
#: vector: float32 `[D]`;
#: text: the env gives a `str`; the runtime hashes it into int64 token ids `[TEXT_TOKENS]`;
#: discrete: int64 `[K]`, component k an index in `0..sizes[k]-1`.
IMAGE, VECTOR, TEXT, DISCRETE = "image", "vector", "text", "discrete"
FIELD_KINDS = (IMAGE, VECTOR, TEXT, DISCRETE)
#: Token ids per text field (later words are dropped; 0 pads).
TEXT_TOKENS = 32
#: Names an observation key may not take: the unroll's and the inference request's own
#: fields (the env adapter renames such a key `obs_<key>`).
RESERVED_KEYS = frozenset(
    {
        "reward", "terminated", "truncated", "truncation_value", "action", "baseline",
        "policy_logits", "state_h", "state_c", "policy_version", "level_id", "actor_id",
        "last_action", "done",
    }
)  # fmt: skip

_NUMPY_DTYPES = {IMAGE: np.uint8, VECTOR: np.float32, TEXT: np.int64, DISCRETE: np.int64}

#: LSTM state as `(h, c)`, each `[B, H]`; an empty tuple for a feed-forward agent.
AgentState = tuple["torch.Tensor", ...]


@dataclass(frozen=True)
class ObsField:
    """One key of the observation dict, as actors store it and the agent reads it.

    Attributes:
        name: the key.
        kind: image | vector | text | discrete (`FIELD_KINDS`).
        shape: one step as stored: image `(C, H, W)`, vector `(D,)`, text `(TEXT_TOKENS,)`,
            discrete `(K,)`.
        sizes: discrete only: the number of values of each of the `K` components.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        rank = {IMAGE: 3, VECTOR: 1, TEXT: 1, DISCRETE: 1}.get(self.kind)
        if rank is None:
            raise ValueError(f"obs field {self.name!r}: kind {self.kind!r}; allowed: {FIELD_KINDS}")
        if len(self.shape) != rank or min(self.shape, default=0) < 1:
            raise ValueError(f"obs field {self.name!r} ({self.kind}): bad shape {self.shape}")
        if self.kind == DISCRETE and len(self.sizes) != self.shape[0]:
            raise ValueError(f"obs field {self.name!r}: {self.shape[0]} components need sizes")
        if not self.name or "." in self.name or self.name in RESERVED_KEYS:
            raise ValueError(f"obs field name {self.name!r}: empty, dotted or reserved")

    @property
    def dtype(self) -> np.dtype:
        """The stored dtype: uint8 images, float32 vectors, int64 text ids and indices."""
        return np.dtype(_NUMPY_DTYPES[self.kind])

    def torch_dtype(self) -> torch.dtype:
        """`dtype` as a torch dtype (imports torch)."""
        import torch

        return {IMAGE: torch.uint8, VECTOR: torch.float32}.get(self.kind, torch.int64)


def image_field(name: str, shape: tuple[int, ...]) -> ObsField:
    return ObsField(name, IMAGE, tuple(int(d) for d in shape))


def vector_field(name: str, size: int) -> ObsField:
    return ObsField(name, VECTOR, (int(size),))


def text_field(name: str) -> ObsField:
    return ObsField(name, TEXT, (TEXT_TOKENS,))


def discrete_field(name: str, sizes: tuple[int, ...]) -> ObsField:
    return ObsField(name, DISCRETE, (len(sizes),), tuple(int(n) for n in sizes))


@dataclass(frozen=True, init=False)
class ObsSpec:
    """What an agent needs to know about an env's observations and actions: the one
    description of the observation dict that the env batch, the unroll buffers (local and
    Ray), the inference channels, the agent and the losses all read.

    Build it from its fields, `ObsSpec(fields=(...), num_actions=n)`, or in the form of the
    `frame` + `instruction` contract, `ObsSpec(frame_shape, frame_dtype, num_actions,
    has_instruction)`: a `[C, H, W]` frame is an image field `frame`, a `[D]` frame a vector
    field, and `has_instruction` adds the text field `instruction`. `num_actions=n` means
    one of `n` discrete actions; any other action space is given as `actions=ActionSpec(...)`
    (`gazelle.actions`) instead.

    Attributes:
        fields: the observation's fields in a fixed order (`frame` first when present).
        actions: the env's actions (`gazelle.actions.ActionSpec`).
    """

    fields: tuple[ObsField, ...]
    actions: ActionSpec

    def __init__(
        self,
        frame_shape: tuple[int, ...] | None = None,
        frame_dtype: np.dtype | type | None = None,
        num_actions: int = 0,
        has_instruction: bool = False,
        *,
        fields: tuple[ObsField, ...] | None = None,
        actions: ActionSpec | None = None,
    ) -> None:
        if fields is None:
            if frame_shape is None:
                raise ValueError("ObsSpec needs a frame_shape or its fields")
            shape = tuple(int(d) for d in frame_shape)
            frame = image_field(FRAME, shape) if len(shape) == 3 else ObsField(FRAME, VECTOR, shape)
            fields = (frame, text_field(INSTRUCTION)) if has_instruction else (frame,)
        elif frame_shape is not None or frame_dtype is not None or has_instruction:
            raise ValueError("ObsSpec: give either the frame (and instruction) or the fields")
        names = [f.name for f in fields]
        if len(set(names)) != len(names) or not fields:
            raise ValueError(f"ObsSpec: no field, or a name given twice: {names}")
        if actions is None:
            if int(num_actions) < 1:
                raise ValueError("ObsSpec needs num_actions >= 1 or an ActionSpec (actions=)")
            actions = ActionSpec.categorical(int(num_actions))
        elif num_actions and (not actions.is_scalar or actions.num_actions != num_actions):
            raise ValueError(f"ObsSpec: num_actions={num_actions} and actions {actions} differ")
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "actions", actions)

    @property
    def num_actions(self) -> int:
        """The number of actions of an env with one discrete action set (`Discrete(n)`).

        Raises:
            ValueError: the env's actions are of another form (`actions` describes them).
        """
        return self.actions.num_actions

    @property
    def names(self) -> tuple[str, ...]:
        """The keys of the observation dict, in order."""
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> ObsField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"no observation field {name!r}; the fields are {', '.join(self.names)}")

    def without(self, names: tuple[str, ...] | list[str]) -> ObsSpec:
        """The spec with fields `names` withheld from the agent (KeyError if one is unknown;
        ValueError if nothing would be left)."""
        for name in names:
            self.field(name)
        kept = tuple(f for f in self.fields if f.name not in names)
        if not kept:
            raise ValueError("withholding every observation field leaves the agent nothing")
        return ObsSpec(fields=kept, actions=self.actions)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """Shape of the main field: `frame`, else the first image, else the first vector
        (`()` if there is none)."""
        main = self._main()
        return main.shape if main is not None else ()

    @property
    def frame_dtype(self) -> np.dtype:
        """dtype of the main field (see `frame_shape`)."""
        main = self._main()
        return main.dtype if main is not None else np.dtype(np.float32)

    @property
    def has_instruction(self) -> bool:
        return any(f.name == INSTRUCTION for f in self.fields)

    @property
    def is_image(self) -> bool:
        """Whether any field is an image (image torsos then encode them)."""
        return any(f.kind == IMAGE for f in self.fields)

    def _main(self) -> ObsField | None:
        for test in (
            lambda f: f.name == FRAME,
            lambda f: f.kind == IMAGE,
            lambda f: f.kind == VECTOR,
        ):
            for f in self.fields:
                if test(f):
                    return f
        return None

    def describe(self) -> str:
        """`frame uint8 [4, 84, 84], gamevariables float32 [2]` (for messages)."""
        parts = []
        for f in self.fields:
            what = "text" if f.kind == TEXT else f"{f.dtype} {list(f.shape)}"
            if f.kind == DISCRETE:
                what = f"discrete {list(f.sizes)}"
            parts.append(f"{f.name} {what}")
        return ", ".join(parts)


class AgentOutput(NamedTuple):
    """One agent output, per step `[B, ...]` or per unroll `[T, B, ...]`.

    Attributes:
        action: sampled (or greedy) action, `[.., *actions.shape]` (`gazelle.actions`): an
            int64 index `[..]` for one discrete action set.
        policy_logits: the policy's distribution parameters, float `[.., P]`
            (`ActionSpec.num_params`): unnormalised log-probabilities of a discrete action
            set; a Gaussian's means and log-stds (`gazelle.distributions`).
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
        observation: dict with one tensor per field of the `ObsSpec` (`frame`, text as
            hashed token ids, int64 `[.., L]`, 0 = padding; see `gazelle.models.instruction`).
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
