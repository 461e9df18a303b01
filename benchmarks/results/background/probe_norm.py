"""Probe torsos of docs/results.md's "The background at 0" runs (not shipped; kept as the
record of what those runs trained): the shallow torso with a normalisation before each ReLU,
on frames centred on their mean, and on frames with their background (most common byte) at
0, the probe of what `--subtract-background` now ships. Run with this folder on PYTHONPATH:
`gazelle train --model probe_norm:ShallowModeCentered ...`."""

import torch
from torch import nn

from gazelle.models.torsos import ShallowTorso


class ShallowReluNorm(ShallowTorso):
    """The shallow torso with GroupNorm (one group: a conv layer's channels and pixels)
    before each conv ReLU, LayerNorm over the 256 linear units before theirs."""

    def __init__(self, frame_shape):
        super().__init__(frame_shape)
        conv1, relu1, conv2, relu2 = self.convs
        self.convs = nn.Sequential(
            conv1, nn.GroupNorm(1, 16), relu1, conv2, nn.GroupNorm(1, 32), relu2
        )
        self.norm = nn.LayerNorm(256)

    def forward(self, frames):
        return self.relu(self.norm(self.linear(self.convs(self._image(frames)).flatten(1))))


class ShallowCentered(ShallowTorso):
    """The shallow ReLU torso (the shipped layers) on frames centred per frame: x / 255
    minus its mean over the frame's pixels and stacked channels."""

    def centre(self, frames, x):
        return x - x.mean(dim=(1, 2, 3), keepdim=True)

    def forward(self, frames):
        x = self.centre(frames, self._image(frames))
        return self.relu(self.linear(self.convs(x).flatten(1)))


def background(frames):
    """The most common value of each uint8 frame `[N, C, H, W]`, read on every 4th pixel of
    the newest channel: `[N]` (what `gazelle.models.torsos.background_level` ships)."""
    sample = frames[:, -1, ::4, ::4].reshape(frames.shape[0], -1).long()
    counts = torch.zeros(frames.shape[0], 256, device=frames.device)
    counts.scatter_add_(1, sample, torch.ones_like(sample, dtype=counts.dtype))
    return counts.argmax(dim=1)


class ShallowModeCentered(ShallowCentered):
    """The shallow ReLU torso on frames with their background at 0."""

    def centre(self, frames, x):
        return x - (background(frames).to(x.dtype) / 255.0).view(-1, 1, 1, 1)
