"""One encoder per observation field, chosen by the field's kind (`gazelle.types.ObsField`).

| kind     | encoder                                                                 | output |
| -------- | ----------------------------------------------------------------------- | ------ |
| image    | the `--model` torso (`make_torso`), each key with its own weights; an   | torso's|
|          | image smaller than the torso takes is scaled up by a whole factor first |        |
| vector   | `frame`: the `--model` torso when it is a vector torso (mlp, the user's)| 64     |
|          | else `VectorEncoder`: symlog, then linear 64, tanh, linear 64, tanh     |        |
| text     | `InstructionEncoder` (hashed words -> LSTM)                             | 64     |
| discrete | `DiscreteEncoder`: an embedding of 16 per component, concatenated       | 16 * K |

Why symlog on vectors other than `frame`: a dict's vectors are the env's own numbers (a
health of 100, ammo, coordinates) on scales nobody normalised; `sign(x) * log(1 + |x|)` keeps
small values as they are and brings large ones within reach of the tanh units. `frame`
vectors keep the `mlp` torso unchanged (CartPole, the diagnostic tasks, their checkpoints).

Why scale small images up inside the model: the unroll stores the env's image as it is (a
7x7 MiniGrid grid stays 49 pixels a channel in shared memory) and nearest-neighbour scaling
by a whole factor (each pixel a block) costs a copy on the learner.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gazelle.models.instruction import InstructionEncoder
from gazelle.models.torso_factory import make_torso
from gazelle.models.torsos import TORSOS, MLPTorso, Torso
from gazelle.types import DISCRETE, FRAME, IMAGE, TEXT, VECTOR, ObsField, ObsSpec

#: Embedding size of each component of a discrete field.
DISCRETE_EMBEDDING = 16
#: Hidden units of `VectorEncoder`.
VECTOR_HIDDEN = 64


def symlog(x: torch.Tensor) -> torch.Tensor:
    """`sign(x) * log(1 + |x|)`, elementwise."""
    return torch.sign(x) * torch.log1p(x.abs())


class VectorEncoder(nn.Module):
    """float32 `[N, D]` -> `[N, 64]`: symlog, linear 64, tanh, linear 64, tanh."""

    def __init__(self, size: int, hidden: int = VECTOR_HIDDEN) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.output_size = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(symlog(x.float()))


class DiscreteEncoder(nn.Module):
    """int64 `[N, K]` indices (component k in `0..sizes[k]-1`) -> float `[N, K * dim]`: one
    embedding table holds every component's rows, component k's after those of 0..k-1."""

    def __init__(self, sizes: tuple[int, ...], dim: int = DISCRETE_EMBEDDING) -> None:
        super().__init__()
        self.embedding = nn.Embedding(int(sum(sizes)), dim)
        offsets = torch.tensor([0, *sizes[:-1]], dtype=torch.int64).cumsum(0)
        self.offsets: torch.Tensor
        self.high: torch.Tensor
        self.register_buffer("offsets", offsets, persistent=False)
        self.register_buffer("high", torch.tensor(sizes, dtype=torch.int64) - 1, persistent=False)
        self.sizes = tuple(sizes)
        self.output_size = dim * len(sizes)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        # why: clamp, so a value out of the declared range cannot index another component.
        rows = torch.minimum(index.long().clamp(min=0), self.high) + self.offsets
        return self.embedding(rows).flatten(-2)  # [N, K, dim] -> [N, K * dim]


def upscale_factor(torso: str, shape: tuple[int, ...]) -> int:
    """The whole factor an image `[C, H, W]` is scaled up by for torso `torso` (1: none):
    the smallest that makes both sides at least the torso's `min_side`."""
    cls = TORSOS.get(torso)
    min_side = int(getattr(cls, "min_side", 1)) if cls is not None else 1
    return max(1, math.ceil(min_side / min(shape[1], shape[2])))


def upscale(images: torch.Tensor, factor: int) -> torch.Tensor:
    """`[N, C, H, W]` -> `[N, C, H * factor, W * factor]`, each pixel a `factor` block."""
    if factor == 1:
        return images
    return images.repeat_interleave(factor, dim=-2).repeat_interleave(factor, dim=-1)


def make_encoder(
    field: ObsField,
    torso: str,
    spec: ObsSpec,
    activation: str | None = None,
    subtract_background: bool = False,
) -> nn.Module:
    """The encoder of one field (see the module docstring); it has an int `output_size`.
    `activation` goes to the image torso (`gazelle.models.torso_factory.make_torso`);
    `subtract_background` puts each image's background at 0 (`Torso.subtract_background`).

    Raises:
        ValueError: the torso does not take the field (an image torso for a vector-only
            observation, a vector torso for an image), or `subtract_background` for an image
            torso that is not a `Torso` (it has no `_image` to do it in).
    """
    if field.kind == IMAGE:
        c, h, w = field.shape
        k = upscale_factor(torso, field.shape)
        image_torso = make_torso(torso, (c, h * k, w * k), activation)
        if subtract_background:
            if not (isinstance(image_torso, Torso) and image_torso.reads_through_image):
                raise ValueError(
                    f"torso {torso!r} makes its own floats from the frames, so it cannot"
                    " take them with the background at 0 (a subclass of"
                    " gazelle.models.torsos.Torso that reads them through self._image can)"
                )
            image_torso.subtract_background = True
        return image_torso
    if field.kind == VECTOR:
        if field.name != FRAME:
            return VectorEncoder(field.shape[0])
        builtin = TORSOS.get(torso)
        if builtin is not None and builtin.is_image and spec.is_image:
            return MLPTorso(field.shape)  # why: the image torso is for the image keys
        return make_torso(torso, field.shape)
    if field.kind == TEXT:
        return InstructionEncoder()
    if field.kind == DISCRETE:
        return DiscreteEncoder(field.sizes)
    raise ValueError(f"obs field {field.name!r}: no encoder for kind {field.kind!r}")


def random_obs(
    spec: ObsSpec, shape: tuple[int, ...], generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """Random observations of every field of `spec` with leading dims `shape` (`[B]` or
    `[T, B]`), for benchmarks and checks: uniform image bytes, normal vectors, token ids of
    8 words, indices within each component's range."""
    obs: dict[str, torch.Tensor] = {}
    for f in spec.fields:
        size = (*shape, *f.shape)
        if f.kind == IMAGE:
            obs[f.name] = torch.randint(0, 256, size, generator=generator).to(torch.uint8)
        elif f.kind == VECTOR:
            obs[f.name] = torch.randn(size, generator=generator)
        elif f.kind == TEXT:
            obs[f.name] = torch.randint(1, 1000, (*shape, 8), generator=generator)
        else:
            high = torch.tensor(f.sizes, dtype=torch.float64)
            obs[f.name] = (torch.rand(size, generator=generator, dtype=torch.float64) * high).long()
    return obs
