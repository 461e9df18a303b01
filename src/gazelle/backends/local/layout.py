"""The layout of an unroll slot: its fields, their shapes and dtypes, time-major. Every
observation field of the `ObsSpec` is a field of the slot, under its own key."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gazelle.types import ObsSpec

#: Per-unroll fields of a gathered batch (`[B, ...]`, no time axis).
META_FIELDS = ("policy_version", "level_id", "actor_id")


def is_state(name: str) -> bool:
    """Per-slot fields without a time axis (the agent state at the unroll's start)."""
    return name.startswith("state_")


def is_per_unroll(name: str) -> bool:
    """Fields of a gathered batch indexed `[B, ...]` rather than `[T+1, B, ...]`."""
    return is_state(name) or name in META_FIELDS


#: Per-step fields of a slot besides the observation: name -> dtype (shape `[T+1]`).
STEP_FIELDS: dict[str, torch.dtype] = {
    "reward": torch.float32,
    "terminated": torch.bool,
    "truncated": torch.bool,
    "truncation_value": torch.float32,
    "baseline": torch.float32,
}


@dataclass(frozen=True)
class SlotLayout:
    """Shapes of one unroll slot."""

    unroll_length: int
    obs_spec: ObsSpec
    state_size: int  # LSTM hidden size; 0 for a feed-forward agent

    def field_shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """name -> (shape of one slot, dtype): `[T+1, ...]` per step field (each observation
        field `[T+1, *field.shape]`), `[H]` for state."""
        steps = self.unroll_length + 1
        spec = self.obs_spec
        shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]
        shapes = {name: ((steps,), dtype) for name, dtype in STEP_FIELDS.items()}
        for field in spec.fields:
            shapes[field.name] = ((steps, *field.shape), field.torch_dtype())
        actions = spec.actions
        action_dtype = torch.int64 if actions.is_discrete else torch.float32
        shapes["action"] = ((steps, *actions.shape), action_dtype)
        shapes["policy_logits"] = ((steps, actions.num_params), torch.float32)
        if self.state_size:
            shapes["state_h"] = ((self.state_size,), torch.float32)
            shapes["state_c"] = ((self.state_size,), torch.float32)
        return shapes
