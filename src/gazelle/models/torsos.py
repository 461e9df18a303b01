"""Torsos: the networks that turn one frame into a feature vector.

Every torso takes a batch of frames `[N, *frame_shape]` and returns features
`[N, output_size]`. Image torsos take uint8 `[N, C, H, W]` frames and scale them to [0, 1]
inside (`/ 255`); the `mlp` torso takes float32 vectors `[N, D]` as they are.

| name       | layers                                                              | output |
| ---------- | ------------------------------------------------------------------- | ------ |
| `deep`     | IMPALA ResNet: 3 stages (16, 32, 32 channels) of conv 3x3, max-pool | 256    |
|            | 3x3 stride 2, 2 residual blocks; then relu, linear 256, relu        |        |
| `shallow`  | IMPALA shallow: conv 16 8x8 s4, conv 32 4x4 s2, linear 256 (relu)   | 256    |
| `nature`   | DQN: conv 32 8x8 s4, conv 64 4x4 s2, conv 64 3x3 s1, linear 512     | 512    |
| `universe` | A3C starter agent: 4 x (conv 32 3x3 s2 'same', ELU), flatten        | 32*h*w |
| `mlp`      | vectors: linear 64, tanh, linear 64, tanh                           | 64     |

`deep`, `shallow`, `nature` and `universe` take an `activation` (`ACTIVATIONS`): `relu`
(the first three's own, as in their papers) or `elu` (`universe`'s own, the starter
agent's; its slope never reaches 0). On Pong's
frames, almost all one colour, 240 of the shallow torso's 256 linear units never fired from
~0.1-0.4M frames on (IMPALA and APPO alike): a ReLU pushed below zero on every frame passes
no gradient again. ELU halved APPO's frames on Pong (a leaky ReLU did not) and failed
Breakout (2 seeds each); A3C's `universe` torso with ReLU went further on Breakout than
any run with its ELU (one seed; docs/results.md, "ELU in the torso").

`universe` keeps the starter agent's design: the flattened conv output goes straight to the
core (no linear layer), so its size follows the frame (288 for its 42x42 frames).
`mlp` uses tanh, the usual choice for small vector-observation policies.

'same' padding (`deep`, `universe`) follows TensorFlow: `gazelle.models.padding`.

**Background at 0** (`subtract_background`, `--subtract-background`): an image torso can
take each frame minus its background, each channel's most common byte (`background_level`;
a stacked grey frame's four channels share it, an RGB frame has one per colour), so that
the screen's constant part is 0: `(frame - background) / 255`. Why: on a screen of one
colour that is not black (Pong's grey, 87/255 on 83% of the pixels), every weight of a
unit sees that colour, so each Adam step (a step of `lr` in every weight) moves the unit's
input on the whole screen at once; ReLU units pushed below 0 everywhere pass no gradient
again (IMPALA and APPO lost 10-14 of the shallow torso's 16 first-layer channels on Pong).
With the background at 0 only the objects drive the units. Black backgrounds (Breakout,
SpaceInvaders) have a background of 0: the frames are unchanged. Centring on the frame's
mean instead broke Breakout (its black became -0.16 and the torso's units died):
docs/results.md, "The background at 0".

`channels_last` memory format is chosen per torso and per use by measurement (one thread,
torch 2.13 CPU, `gazelle.bench.models`, samples/s channels_last vs not): acting is the step
without autograd, learning the unroll + backward.

| torso      | acting B=1 / 16 / 64     | learning fp32 / bf16 | choice (act, learn) |
| ---------- | ------------------------ | -------------------- | ------------------- |
| `deep`     | 1.6x / 2.2x / 2.3x       | 1.8x / 1.9x          | on, on              |
| `shallow`  | 1.0x / 0.85x / 0.8x      | 1.6x / 1.1x          | off, on             |
| `nature`   | 1.0x / 0.95x / 0.95x     | 1.3x / 1.1x          | off, on             |
| `universe` | no effect on its 1-channel frames (`[N, 1, H, W]` looks the same in both layouts) |

(`universe`'s learner was 1.3x faster with the conv weights also in channels_last,
`agent.to(memory_format=torch.channels_last)`; that is left to the caller.)

The use is told apart by `torch.is_grad_enabled()`; `channels_last_act` and
`channels_last_learn` can be set on an instance to override the class defaults.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from gazelle.models.padding import SameConv2d, max_pool_same, same_padding

__all__ = [
    "ACTIVATIONS", "TORSOS", "WITH_ACTIVATION", "SameConv2d", "Torso",
    "max_pool_same", "same_padding",
]  # fmt: skip


class Torso(nn.Module):
    """Base class: `forward(frames [N, *frame_shape]) -> features [N, output_size]`."""

    #: Whether the torso takes image frames `[C, H, W]` (else vectors `[D]`).
    is_image: ClassVar[bool] = True
    #: The smallest height and width it takes; a smaller image is scaled up by a whole
    #: factor first (`gazelle.models.encoders.upscale_factor`).
    min_side: ClassVar[int] = 1
    #: Whether frames are converted to `channels_last` before the convolutions, when
    #: acting (autograd off) and when learning (autograd on); see the module doc.
    channels_last_act: bool = False
    channels_last_learn: bool = False
    #: Whether `_image` puts each frame's background at 0 (see the module doc); set on an
    #: instance by `gazelle.models.encoders.make_encoder`.
    subtract_background: bool = False
    #: Whether `forward` reads its frames through `_image` (so `subtract_background` acts);
    #: False for a user's module wrapped as a torso (`gazelle.models.custom.CustomTorso`).
    reads_through_image: ClassVar[bool] = True

    output_size: int

    def __init__(self, frame_shape: tuple[int, ...]):
        super().__init__()
        self.frame_shape = tuple(frame_shape)

    def _image(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 `[N, C, H, W]` -> float `[N, C, H, W]` in [0, 1] (channels_last if chosen);
        in [-1, 1] with each channel's background at 0 when `subtract_background`."""
        learning = torch.is_grad_enabled()
        level = background_level(frames) if self.subtract_background else None
        if self.channels_last_learn if learning else self.channels_last_act:
            # why: converting the uint8 frames is 4x cheaper than converting floats.
            frames = frames.contiguous(memory_format=torch.channels_last)
        images = frames.float()
        if level is not None:
            images = images - level.to(images.dtype)[:, :, None, None]
        return images / 255.0

    def _conv_output_size(self, convs: nn.Module) -> int:
        """Flattened size of `convs` on one zero frame (run once at construction)."""
        try:
            with torch.no_grad():
                return int(convs(torch.zeros(1, *self.frame_shape)).numel())
        except RuntimeError as error:
            raise ValueError(
                f"frames of shape {self.frame_shape} are too small for the "
                f"{type(self).__name__} convolutions: {error}"
            ) from error


#: `background_level` reads every this-many-th row and column of each channel.
BACKGROUND_STRIDE = 4


def background_level(frames: torch.Tensor) -> torch.Tensor:
    """The background of each channel of uint8 frames `[N, C, H, W]`: its most common byte
    (the smallest of equals), read on every `BACKGROUND_STRIDE`-th row and column (441 of
    an 84x84 channel's pixels): int64 `[N, C]`."""
    n, c = frames.shape[:2]
    grid = frames[:, :, ::BACKGROUND_STRIDE, ::BACKGROUND_STRIDE].reshape(n * c, -1).long()
    # why: float counts (exact to 2^24), as argmax takes floats on every device.
    counts = torch.zeros(n * c, 256, device=frames.device)
    counts.scatter_add_(1, grid, torch.ones_like(grid, dtype=counts.dtype))
    # why: argmax returns the first of equal counts, so ties go to the smallest byte.
    return counts.argmax(dim=1).view(n, c)


#: `activation` names of the torsos of `WITH_ACTIVATION`.
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "elu": nn.ELU}


def activation_module(name: str) -> nn.Module:
    """A new module of activation `name` (`ACTIVATIONS`); ValueError naming the allowed."""
    if name not in ACTIVATIONS:
        allowed = " | ".join(ACTIVATIONS)
        raise ValueError(f"activation: invalid value {name!r}; allowed: {allowed}")
    return ACTIVATIONS[name]()


class ResidualBlock(nn.Module):
    """`x + conv(act(conv(act(x))))` with two 3x3 'same' convs: `[N, C, H, W]` -> same."""

    def __init__(self, channels: int, activation: str = "relu"):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.act0, self.act1 = activation_module(activation), activation_module(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(self.act1(self.conv0(self.act0(x))))


class DeepStage(nn.Module):
    """conv 3x3 -> max-pool 3x3 stride 2 ('same') -> residual blocks: `[N, C, H, W]` ->
    `[N, channels, ceil(H/2), ceil(W/2)]`."""

    def __init__(
        self, in_channels: int, channels: int, num_blocks: int = 2, activation: str = "relu"
    ):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.blocks = nn.Sequential(
            *(ResidualBlock(channels, activation) for _ in range(num_blocks))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(max_pool_same(self.conv(x)))


class DeepTorso(Torso):
    """The IMPALA ResNet ("deep"): uint8 `[N, C, H, W]` -> `[N, 256]`."""

    channels_last_act = True
    channels_last_learn = True

    def __init__(
        self,
        frame_shape: tuple[int, ...],
        channels: tuple[int, ...] = (16, 32, 32),
        activation: str = "relu",
    ):
        super().__init__(frame_shape)
        in_channels = [frame_shape[0], *channels[:-1]]
        self.convs = nn.Sequential(
            *(DeepStage(i, o, activation=activation) for i, o in zip(in_channels, channels))
        )
        self.linear = nn.Linear(self._conv_output_size(self.convs), 256)
        self.output_size = 256
        # why: modules, not F.relu, so that `gazelle.runtime.unit_health` sees their units
        # (named relu whatever the activation: the layer names it reports stay the same).
        self.conv_relu, self.relu = activation_module(activation), activation_module(activation)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = self.conv_relu(self.convs(self._image(frames)))
        return self.relu(self.linear(x.flatten(1)))


class ShallowTorso(Torso):
    """The IMPALA paper's shallow network: uint8 `[N, C, H, W]` -> `[N, 256]`."""

    channels_last_learn = True
    min_side = 20  # why: 8x8 stride 4, then 4x4 stride 2, leave 1 pixel of 20

    def __init__(self, frame_shape: tuple[int, ...], activation: str = "relu"):
        super().__init__(frame_shape)
        self.convs = nn.Sequential(
            nn.Conv2d(frame_shape[0], 16, 8, stride=4),
            activation_module(activation),
            nn.Conv2d(16, 32, 4, stride=2),
            activation_module(activation),
        )
        self.linear = nn.Linear(self._conv_output_size(self.convs), 256)
        self.output_size = 256
        # why: a module, so that `gazelle.runtime.unit_health` sees it; still named `relu`
        # whatever the activation, so that the layer names it reports stay the same.
        self.relu = activation_module(activation)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.relu(self.linear(self.convs(self._image(frames)).flatten(1)))


class NatureTorso(Torso):
    """The DQN (Nature 2015) network: uint8 `[N, C, H, W]` -> `[N, 512]`."""

    channels_last_learn = True
    min_side = 36  # why: 8x8 s4, 4x4 s2, 3x3 s1 leave 1 pixel of 36

    def __init__(self, frame_shape: tuple[int, ...], activation: str = "relu"):
        super().__init__(frame_shape)
        self.convs = nn.Sequential(
            nn.Conv2d(frame_shape[0], 32, 8, stride=4),
            activation_module(activation),
            nn.Conv2d(32, 64, 4, stride=2),
            activation_module(activation),
            nn.Conv2d(64, 64, 3, stride=1),
            activation_module(activation),
        )
        self.linear = nn.Linear(self._conv_output_size(self.convs), 512)
        self.output_size = 512
        # why: a module, so that `gazelle.runtime.unit_health` sees it; still named `relu`
        # whatever the activation, so that the layer names it reports stay the same.
        self.relu = activation_module(activation)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.relu(self.linear(self.convs(self._image(frames)).flatten(1)))


class UniverseTorso(Torso):
    """The A3C starter agent's conv stack: uint8 `[N, C, H, W]` -> `[N, 32*h*w]`
    (`h = ceil(H/16)`, `w = ceil(W/16)`; 288 for 42x42 frames)."""

    def __init__(self, frame_shape: tuple[int, ...], num_layers: int = 4, activation: str = "elu"):
        super().__init__(frame_shape)
        layers: list[nn.Module] = []
        for i in range(num_layers):
            conv = SameConv2d(frame_shape[0] if i == 0 else 32, 32, 3, 2)
            layers += [conv, activation_module(activation)]
        self.convs = nn.Sequential(*layers)
        self.output_size = self._conv_output_size(self.convs)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.convs(self._image(frames)).flatten(1)


class MLPTorso(Torso):
    """Two tanh hidden layers of 64 for vector observations: float32 `[N, D]` -> `[N, 64]`."""

    is_image = False

    def __init__(self, frame_shape: tuple[int, ...], hidden: int = 64):
        super().__init__(frame_shape)
        self.layers = nn.Sequential(
            nn.Linear(frame_shape[0], hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.output_size = hidden

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.layers(frames.float())


#: Torso classes by name; each is built as `cls(frame_shape)`.
TORSOS: dict[str, type[Torso]] = {
    "deep": DeepTorso,
    "shallow": ShallowTorso,
    "nature": NatureTorso,
    "universe": UniverseTorso,
    "mlp": MLPTorso,
}


def check_frames(name: str, cls: type[Torso], frame_shape: tuple[int, ...]) -> None:
    """Raise ValueError unless torso class `cls` takes frames of `frame_shape` (image torsos
    `[C, H, W]`, vector torsos `[D]`)."""
    is_image = len(frame_shape) == 3
    if cls.is_image and not is_image:
        raise ValueError(
            f"torso {name!r} needs image frames [C, H, W], got frame shape {tuple(frame_shape)};"
            " use torso='mlp' for vector observations"
        )
    if not cls.is_image and len(frame_shape) != 1:
        raise ValueError(
            f"torso {name!r} needs vector frames [D], got frame shape {tuple(frame_shape)};"
            " use an image torso (deep, shallow, nature, universe) for images"
        )


#: The torsos that take an `activation`, and theirs when none is given.
WITH_ACTIVATION = {"deep": "relu", "shallow": "relu", "nature": "relu", "universe": "elu"}
