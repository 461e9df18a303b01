"""Train IMPALA with a torso (the network before the LSTM core, or before the heads when
there is none) of your own, through gazelle's Python API.

A torso maps a batch of frames `[N, *frame_shape]` to features `[N, output_size]`; here a
residual MLP with layer norm for CartPole's 4-vector. `gazelle.register_torso` names it, and
the learner, the actor processes and test mode all build it by that name.

    python examples/custom_torso.py --frames 100000 --logdir runs/cartpole-resmlp
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import gazelle


class ResidualMLPTorso(nn.Module):
    """float32 `[N, D]` -> `[N, width]`: a linear layer, then `blocks` residual blocks."""

    def __init__(self, frame_shape: tuple[int, ...], width: int = 64, blocks: int = 2) -> None:
        super().__init__()
        (features,) = frame_shape  # vectors only: gazelle passes images as [C, H, W]
        self.output_size = width  # what the core after the torso is sized by
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU())
            for _ in range(blocks)
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = self.inp(frames.float())
        for block in self.blocks:
            x = x + block(x)
        return torch.relu(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--logdir", default="runs/cartpole-resmlp")
    args = parser.parse_args()

    # The factory is called as factory(frame_shape); a class taking the frame shape is one.
    gazelle.register_torso("resmlp", ResidualMLPTorso)
    result = gazelle.train(
        gazelle.Config.of(env="CartPole-v1", model="resmlp", num_actors=2),
        total_frames=args.frames,
        logdir=args.logdir,
        log_interval_s=1.0,
    )
    print(f"trained {result.frames} frames, recent return {result.recent_return}")
    scores = gazelle.evaluate(result.logdir, episodes=5, verbose=False)
    print(f"test mode: mean return {scores['levels']['CartPole-v1']['mean_return']:.1f}")


if __name__ == "__main__":
    main()
