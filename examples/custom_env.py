"""Train IMPALA on a Gymnasium env of your own, through gazelle's Python API.

The env below has its own observation dict (`position`, `command`); a small wrapper maps it
to gazelle's contract (`frame`: a float32 vector or uint8 image, `instruction`: text, read by
the agent's language encoder), and `gazelle.register_env` gives it an id that the learner,
the actor processes and test mode all find.

    python examples/custom_env.py --frames 50000 --logdir runs/signpost
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

import gazelle

CORRIDOR = 5  # cells; the agent starts in the middle one
CHARSET = "abcdefghijklmnopqrstuvwxyz "


class SignpostEnv(gymnasium.Env):
    """A corridor: a sign says which end to walk to (+1 there, -1 at the other end)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"position": spaces.Discrete(CORRIDOR), "command": spaces.Text(16, charset=CHARSET)}
        )
        self.action_space = spaces.Discrete(2)  # 0: step left, 1: step right
        self._position, self._goal = CORRIDOR // 2, 0

    def _obs(self) -> dict[str, Any]:
        return {"position": self._position, "command": "go left" if self._goal == 0 else "go right"}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position = CORRIDOR // 2
        self._goal = 0 if self.np_random.random() < 0.5 else CORRIDOR - 1
        return self._obs(), {}

    def step(self, action: int):
        self._position += 1 if action == 1 else -1
        at_end = self._position in (0, CORRIDOR - 1)
        reward = (1.0 if self._position == self._goal else -1.0) if at_end else 0.0
        return self._obs(), reward, at_end, False, {}


class ToGazelleObs(gymnasium.ObservationWrapper):
    """`{position, command}` -> `{frame: one-hot position [5], instruction: command}`."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.observation_space = spaces.Dict(
            {
                "frame": spaces.Box(0.0, 1.0, (CORRIDOR,), np.float32),
                "instruction": spaces.Text(16, charset=CHARSET),
            }
        )

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        frame = np.zeros(CORRIDOR, np.float32)
        frame[observation["position"]] = 1.0
        return {"frame": frame, "instruction": observation["command"]}


def make_signpost() -> gymnasium.Env:
    """The maker `register_env` calls (a module-level function: actors import it by name)."""
    return ToGazelleObs(SignpostEnv())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--logdir", default="runs/signpost")
    args = parser.parse_args()

    # A time limit of 20 steps: episodes cut there are truncated (bootstrapped), not ended.
    gazelle.register_env("Signpost-v0", make_signpost, max_episode_steps=20)
    config = gazelle.Config.of(
        env="Signpost-v0", total_frames=args.frames, logdir=args.logdir, num_actors=2
    )
    result = gazelle.train(config, envs_per_actor=4, batch_size=8, log_interval_s=1.0)
    print(f"trained {result.frames} frames, recent return {result.recent_return}")
    # Test mode runs in this process, where Signpost-v0 is registered.
    scores = gazelle.evaluate(result.logdir, episodes=10, verbose=False)
    print(f"test mode: mean return {scores['levels']['Signpost-v0']['mean_return']:.2f}")


if __name__ == "__main__":
    main()
