"""A3C's presets (`--algo a3c --preset`): the values of the fields a user leaves unset.

- `gazelle` (default): the universe-starter-agent's settings (Adam constant, its 42x42
  frames and conv+LSTM network, one env per worker; on Atari 2x its step, 2e-4, with the
  gradient's norm clipped at 15 instead of 40, measured on Pong) with gazelle's agent (the
  LSTM also fed the last reward and action, the IMPALA seed's initialisation, advantages
  from the synced network's values; rollouts end at an episode's end, as the seed's); for
  vector tasks 4 envs per worker, no LSTM, a higher learning rate decayed linearly to 0,
  and no gradient clip;
- `universe-starter`: the starter agent's settings and agent, for every family (all four of
  those points the seed's way; the mlp torso on vector tasks, which it has no network for;
  what gazelle's runtime still does differently: docs/algorithms.md).

The gazelle preset's agent is chosen point by point on Pong, 2 seeds each (docs/results.md,
"A3C: the seed's four differences, measured").
"""

from __future__ import annotations

import math
from typing import Any

#: What the universe-starter-agent's agent is, where gazelle's A3C may differ from it
#: (docs/algorithms.md): its LSTM sees the conv features alone, its initialisation,
#: advantages from the values and bootstrap recorded at acting time, and partial rollouts
#: that end at the terminal step.
UNIVERSE_STARTER_AGENT: dict[str, Any] = dict(
    last_action_reward=False, init="universe", advantage_values="acting",
    end_rollout_at_episode_end=True,
)  # fmt: skip
#: gazelle's A3C agent in those four points, as the Pong runs of docs/results.md ("A3C: the
#: seed's four differences") chose them: rollouts end at an episode's end, as the seed's
#: (ahead on both seeds per frame; one env per worker, as there; the vector preset below
#: keeps fixed-length rollouts); the other three keep gazelle's earlier agent (no win for
#: the seed's way over 2 seeds).
GAZELLE_A3C_AGENT: dict[str, Any] = dict(
    last_action_reward=True, init="seed", advantage_values="synced",
    end_rollout_at_episode_end=True,
)  # fmt: skip
#: The seed's optimiser and actors: one env per worker, Adam 1e-4 constant, clip 40.
_SEED_SETTINGS: dict[str, Any] = dict(
    envs_per_actor=1, learning_rate=1e-4, learning_rate_decay=False, use_lstm=True,
    grad_norm_clip=40.0,
)  # fmt: skip
_BUDGETS = {
    "atari": 30_000_000, "vector": 1_500_000, "dmlab": 1_000_000_000, "image": 5_000_000,
    "vizdoom": 20_000_000, "control": 1_000_000,
}  # fmt: skip

#: A3C presets: preset name -> env family -> flat name -> value.
A3C_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "gazelle": {
        family: {**_SEED_SETTINGS, **GAZELLE_A3C_AGENT, "total_frames": budget}
        for family, budget in _BUDGETS.items()
    },
    "universe-starter": {
        family: {**_SEED_SETTINGS, **UNIVERSE_STARTER_AGENT, "total_frames": budget}
        for family, budget in _BUDGETS.items()
    },
}
# Vector tasks (CartPole, diagnostics), measured (docs/results.md, "A3C on vector tasks"):
# 4 envs per worker (batched inference, 3.3x the frames/s of one env), lr decayed to 0, no
# gradient clip (the seed's summed value loss on returns up to ~100 gives norms of
# 400-20,000: the clip at 40 rescaled every update by a factor that varied 100x, and
# Adam's running RMS, set by the big ones, shrank the rest: 374 at 1M frames with it, 495
# without). No LSTM, lr 2e-3: with the seed's LSTM (at 5e-4) the 100-episode mean
# collapsed as IMPALA's did on CartPole (480 -> 61 after reaching 450, 311 below-random
# episodes in a row; 386 -> 56 in a CI run); without it, 3 seeds reached 450 at 344-498K
# frames (median 369K; LSTM: 434-574K, median 446K) and never fell more than ~30, at 2.5x
# the frames/s. Without the LSTM 5e-4 was slow (273-388 at 1M) and 1e-3 reached 450 at
# ~655K. A task that needs memory (gazelle/Memory-v0) asks: --use-lstm. Rollouts run
# --unroll-length steps across episode ends: with 4 envs a rollout that stopped at any env's
# episode end was a few steps long on short-episode tasks, and the memory task with the LSTM
# was not solved within 150K frames (with fixed-length rollouts its CI test passes in ~8 s).
# Atari, measured on Pong (docs/results.md, "A3C's step: twice the seed's, clipped at 15"):
# the seed's Adam 1e-4 and clip 40 were set for 16 workers; with 2, 3x the step (3e-4)
# saturated the network after one burst of updates (gradient norm 16 -> 32, the policy's
# entropy 1.3 -> 0.01), while the norm is 4-16 otherwise. 2x the step with the norm clipped
# at 15 reached 18 at 4.87M frames on seed 1 and 17.9 by 5.48M on seed 2, against 6.31M and
# -15.5 at 5.26M at the seed's step; ahead on both from 2.5M frames. Not shown general
# (docs/results.md, "A second seed on each game"): on Breakout and SpaceInvaders it learns
# sooner, then falls back to random play in 4 runs of 6 and ends behind the seed's step in
# 3 of 4 seeds; neither step wins 2 seeds on both games, so it stays; open.
# The other image families keep the seed's (not measured there).
A3C_PRESETS["gazelle"]["atari"].update(learning_rate=2e-4, grad_norm_clip=15.0)
# With --use-lstm at this rate, the LSTM core and the policy head step at a tenth of it (as
# IMPALA's vector preset; docs/notes/lstm.md, "A3C at the vector preset's rate"): at one
# rate CartPole's policy went deterministic within 68-88K frames on 2 seeds of 2 (entropy
# 1e-4, 9.4 steps an episode), one until 1M frames, the other until ~510K (450 at 684K);
# at a tenth both reached 450, at 161K and 243K frames (one fell by 420 once, then held).
A3C_PRESETS["gazelle"]["vector"].update(
    envs_per_actor=4, learning_rate=2e-3, learning_rate_decay=True, grad_norm_clip=math.inf,
    use_lstm=False, end_rollout_at_episode_end=False, lstm_lr_scale=0.1,
)  # fmt: skip
# Continuous control (a float Box action): the vector settings (not measured there). A3C
# takes no --normalize-obs (its workers compute their own gradients; nothing would move
# the statistics) and no PopArt; its rewards are unclipped already (--reward-clipping none).
A3C_PRESETS["gazelle"]["control"].update(A3C_PRESETS["gazelle"]["vector"])
A3C_PRESETS["gazelle"]["control"].update(total_frames=_BUDGETS["control"])
for _families in A3C_PRESETS.values():
    for _values in _families.values():
        _values.setdefault("subtract_background", False)  # the starter agent's frames / 255
        # the seed's one rate for every layer on images (a share for the core and the
        # policy head is not measured to win there)
        _values.setdefault("lstm_lr_scale", 1.0)
