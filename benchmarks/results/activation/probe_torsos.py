"""Probe torsos of docs/results.md's activation runs (not shipped; kept as the record of what
those runs trained): the shallow torso with ELU, leaky ReLU, or ELU in only its conv layers
or only after its linear layer, and the universe torso with ReLU. Run with this folder on
PYTHONPATH: `gazelle train --model probe_torsos:ShallowEluConv ...`. `--activation` now
ships the whole-torso ELU and ReLU variants."""

from torch import nn

from gazelle.models.torsos import Torso, UniverseTorso


class ShallowAct(Torso):
    act = nn.ELU
    channels_last_learn = True
    min_side = 20

    def __init__(self, frame_shape):
        super().__init__(frame_shape)
        self.convs = nn.Sequential(
            nn.Conv2d(frame_shape[0], 16, 8, stride=4),
            self.act(),
            nn.Conv2d(16, 32, 4, stride=2),
            self.act(),
        )
        self.linear = nn.Linear(self._conv_output_size(self.convs), 256)
        self.output_size = 256
        self.out_act = self.act()

    def forward(self, frames):
        return self.out_act(self.linear(self.convs(self._image(frames)).flatten(1)))


class ShallowElu(ShallowAct):
    act = nn.ELU


class ShallowLeaky(ShallowAct):
    act = nn.LeakyReLU  # slope 0.01 below zero


class UniverseRelu(UniverseTorso):
    """The starter agent's conv stack with ReLU in place of its ELU."""

    def __init__(self, frame_shape):
        super().__init__(frame_shape)
        for i, m in enumerate(self.convs):
            if isinstance(m, nn.ELU):
                self.convs[i] = nn.ReLU()


class ShallowEluFc(ShallowAct):
    """ReLU in the two conv layers, ELU on the linear layer's output only."""

    act = nn.ReLU

    def __init__(self, frame_shape):
        super().__init__(frame_shape)
        self.out_act = nn.ELU()


class ShallowEluConv(ShallowAct):
    """ELU in the two conv layers, ReLU on the linear layer's output."""

    act = nn.ELU

    def __init__(self, frame_shape):
        super().__init__(frame_shape)
        self.out_act = nn.ReLU()
