"""APPO's presets: IMPALA's preset of the same name and family, then APPO's own values."""

from __future__ import annotations

from typing import Any

from gazelle.algorithms.impala.presets import IMPALA_PRESETS

#: APPO: the IMPALA preset of the same family and name, then these. Several passes per
#: batch (epochs x minibatches optimiser steps), PPO's clip on the ratio to the actors'
#: policy, advantages normalised per minibatch (so the entropy weight is PPO's 0.01) and
#: V-trace's lambda 0.95 (GAE's usual value) for lower-variance targets.
APPO_PRESETS: dict[str, dict[str, Any]] = {
    family: dict(epochs=2, minibatches=2, clip_ratio=0.1, normalize_advantages=True,
                 vtrace_lambda=0.95, entropy_cost=0.01, learning_rate=0.0003,
                 optimizer="adam", epsilon=1e-8)
    for family in ("vector", "atari", "dmlab", "image", "vizdoom", "control")
}  # fmt: skip
#: ViZDoom: PopArt (the IMPALA preset's) already puts the advantages in units of the returns'
#: spread; normalising them per minibatch as well froze HealthGathering at 284 with IMPALA's
#: loss (every game ended at the same tic), and without it APPO reached 1,707 at 800K frames
#: (docs/results.md, "ViZDoom").
APPO_PRESETS["vizdoom"].update(normalize_advantages=False)
#: One rate for the whole agent, the LSTM's too: IMPALA's vector preset steps its core and
#: policy head at a tenth (`lstm_lr_scale`), measured with its RMSProp at 0.004; APPO's
#: Adam at 3e-4 with the clip is not measured with it.
for _values in APPO_PRESETS.values():
    _values["lstm_lr_scale"] = 1.0
#: Continuous control (MuJoCo; the family's default algorithm): PPO's shape of update
#: (docs/notes/continuous.md): 2,048 frames a batch as 8 envs x 256 steps, one actor acting
#: in lockstep with the learner (no policy lag), 10 epochs of 32 minibatches of 64 single
#: steps drawn from every unroll (`--minibatch-unit step`: PPO's 320 Adam steps a batch),
#: clip 0.2, no entropy bonus, unclipped rewards with PopArt, observations normalised; the
#: clip anchored at the learner's policy before each batch (decoupled PPO) and a value
#: network of its own (PPO's continuous agents have one).
#:
#: 1M frames, 3 seeds each (notes, sittings 8-9): minibatches of single steps against 8
#: minibatches of whole unrolls (80 Adam steps a batch): Hopper-v5 2,770, 2,987 and 2,297
#: against 1,945, 1,946 and 1,052; HalfCheetah-v5 1,828, 1,880 and 2,984 against 1,732,
#: 1,501 and 1,531. With a quarter of the steps the value network lagged its targets
#: (explained variance 0.90-0.95 late in Hopper's runs against 0.999) and the policy moved
#: half as far a batch (KL 0.005-0.006 against 0.010-0.012). The 320 steps cost about 2 s a
#: batch on a CPU core, so frames/s halve (about 730 against 1,600 with two runs on 2
#: cores); per minute Hopper still leads (in about the same minutes, 0.5M frames at its
#: speed and 1M at the old one's: 2,065-2,210 against 1,052-1,946).
#: The layout: 8 x 256 from one actor in lockstep, against 64 envs x 32 steps from 2
#: free-running actors (Hopper 1,648 +- 516 against 984 +- 627): short slices bootstrap
#: every 32 steps on a value still being fitted (CleanRL's own PPO halves on Hopper with
#: 64 x 32), and a policy lag cuts long unrolls' traces (8 x 256 free-running, lag 3-4:
#: 561 and 388 on Hopper's seed 1, against 1,945 in lockstep). Where lockstep cannot act
#: (Ray, central inference on a GPU, --num-actors > 1) the run says so
#: (`layout.lockstep_blocked`).
#: Every value is set here, so that the impala-paper preset runs the same agent (its LSTM
#: would refuse --separate-value).
APPO_PRESETS["control"].update(
    envs_per_actor=8, batch_size=8, unroll_length=256, lockstep=True, epochs=10,
    minibatches=32, minibatch_unit="step", clip_ratio=0.2, clip_anchor="learner",
    entropy_cost=0.0, popart=True, reward_clipping="none", normalize_obs=True,
    separate_value=True, use_lstm=False, total_frames=1_000_000,
)  # fmt: skip

#: preset name -> env family -> flat name -> value: IMPALA's, then `APPO_PRESETS`.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    preset: {family: {**values, **APPO_PRESETS[family]} for family, values in families.items()}
    for preset, families in IMPALA_PRESETS.items()
}
