"""IMPALA's presets (`--preset`): the values of the fields a user leaves unset, per env family.

- `gazelle` (default): values measured to learn fast on the project's machines; every
  difference from the paper is justified by a run in docs/results.md;
- `impala-paper`: the IMPALA paper's Atari learner settings (its Table G.1: RMSProp as in
  TF with epsilon 0.01, lr 0.0006, entropy 0.01, B=32, T=20) and the IMPALA seed's DMLab
  defaults. Not the paper's actors (this machine's layout), torso (`auto`) or frame budget
  (50M for Atari is gazelle's): docs/usage.md lists what it does not reproduce.

`gazelle.config.resolve` applies them (`gazelle.config.presets`).
"""

from __future__ import annotations

from typing import Any

#: IMPALA presets: preset name -> env family -> flat name -> value.
IMPALA_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "impala-paper": {
        "vector": dict(
            envs_per_actor=8, batch_size=16, unroll_length=20, total_frames=1_000_000,
            optimizer="rmsprop_tf", learning_rate=0.004, epsilon=0.01, entropy_cost=0.003,
            use_lstm=True,
        ),
        "atari": dict(
            envs_per_actor=32, batch_size=32, unroll_length=20, total_frames=50_000_000,
            optimizer="rmsprop_tf", learning_rate=0.0006, epsilon=0.01, entropy_cost=0.01,
            use_lstm=True,
        ),
        "dmlab": dict(
            envs_per_actor=1, batch_size=2, unroll_length=100, total_frames=1_000_000_000,
            optimizer="rmsprop_tf", learning_rate=0.00048, epsilon=0.1, entropy_cost=0.00025,
            use_lstm=True,
        ),
        "image": dict(
            envs_per_actor=8, batch_size=16, unroll_length=20, total_frames=5_000_000,
            optimizer="rmsprop_tf", learning_rate=0.0006, epsilon=0.01, entropy_cost=0.01,
            use_lstm=True,
        ),
        # ViZDoom stands in for DMLab: the seed's DMLab settings, with its 4 envs per actor.
        "vizdoom": dict(
            envs_per_actor=4, batch_size=2, unroll_length=100, total_frames=1_000_000_000,
            optimizer="rmsprop_tf", learning_rate=0.00048, epsilon=0.1, entropy_cost=0.00025,
            use_lstm=True,
        ),
    },
}  # fmt: skip
#: Continuous control (a float Box action, vector observations): the paper has none; its
#: preset runs them with its vector settings.
IMPALA_PRESETS["impala-paper"]["control"] = dict(IMPALA_PRESETS["impala-paper"]["vector"])
IMPALA_PRESETS["gazelle"] = {
    family: dict(values) for family, values in IMPALA_PRESETS["impala-paper"].items()
}
#: Atari: what Pong measured (docs/results.md). The paper's B=32 with its RMSProp stayed at
#: -20 for 17M frames; Adam at B=32 was still at -19.9 at 10M frames; Adam at B=8 (4x the
#: updates per frame, each weight's step normalised) left -20 at 5M frames. Without the
#: LSTM: Atari's 4 stacked frames carry the motion, and the core is one more layer between
#: the screen and the heads to learn through. Entropy 0.003: -11.3 at 14M frames against
#: -15.4 with 0.01 (0.0006 was no faster than 0.003 to 8M). 50M frames: gazelle's Atari
#: budget (Pong with these settings reached 18 at 26.3M frames, docs/results.md).
IMPALA_PRESETS["gazelle"]["atari"].update(
    batch_size=8, optimizer="adam", learning_rate=0.0006, epsilon=1e-8, entropy_cost=0.003,
    total_frames=50_000_000, use_lstm=False,
)  # fmt: skip
#: Atari frames with their background (most common byte) at 0 (`gazelle.models.torsos`):
#: on Pong's grey screen the shallow torso lost 14 of its 16 first-layer channels and ~90%
#: of its linear units within 0.1-0.4M frames (each Adam step moved every unit's input on
#: the whole screen at once) and learned nothing for 5-10M frames; with the grey at 0,
#: IMPALA reached 7.3 at 5M frames where it had been at -20.2 (docs/results.md, "The
#: background at 0"). A black background (Breakout, SpaceInvaders) is 0 already: no change.
IMPALA_PRESETS["gazelle"]["atari"].update(subtract_background=True)
#: Vector tasks: no LSTM. With it, CartPole's 100-episode mean collapsed to below random
#: (hundreds of 11-20 step episodes) and climbed back, over and over, whatever the learning
#: rate (0.004, 0.002, 0.001), entropy cost (0.01) or optimiser (Adam, clipped or not);
#: without it, 3 seeds rose with 2-6% such episodes (never more than 5 in a row; dips of
#: the mean up to 43%) and reached 450 sooner (docs/results.md, "CartPole: the saw and its
#: cause"). A task that needs memory (hidden state, gazelle/Memory-v0) asks: --use-lstm.
IMPALA_PRESETS["gazelle"]["vector"].update(use_lstm=False)
#: With --use-lstm, the core's and the policy head's steps at a tenth of the rate: the
#: cause of the saw above, measured (docs/notes/lstm.md, "The cause"): RMSProp moves each
#: weight by about the learning rate, so a layer's output moves with the summed size of
#: its inputs, and the LSTM's 256 outputs (most near +-1) moved the policy 10-50x as far per
#: update as the memoryless agent's 64; its entropy fell to ~0.25 within 40K frames and the
#: actors' policy was KL 0.4-1 from the learner's. At a tenth: the memoryless agent's
#: entropy (0.5-0.6) and KL (~0.01), no saw.
IMPALA_PRESETS["gazelle"]["vector"].update(lstm_lr_scale=0.1)
#: Continuous control (MuJoCo; docs/notes/continuous.md): rewards of about -1..+5 a step
#: clipped to [-1, 1] pay running fast no more than running slowly. Unclipped rewards with
#: PopArt, advantages normalised per batch, observations normalised (running mean and std),
#: no entropy bonus (PPO's continuous setting: the Gaussian's learned log-std explores) and
#: Adam at 1e-3: 29 at 250K frames on HalfCheetah-v5, seed 1, against -318 at 3e-4 (random:
#: about -300). Not compared over seeds with the vector preset, which reached 367 and 3 at
#: 300K frames (seeds 1, 2): open. APPO learns it faster (606 and 554 at 300K,
#: `gazelle.algorithms.appo.presets`: APPO is the family's default algorithm). 1M frames:
#: the budget PPO's MuJoCo results are published at.
IMPALA_PRESETS["gazelle"]["control"].update(
    envs_per_actor=8, batch_size=16, unroll_length=20, optimizer="adam", learning_rate=0.001,
    epsilon=1e-8, entropy_cost=0.0, total_frames=1_000_000, use_lstm=False, popart=True,
    reward_clipping="none", normalize_advantages=True, normalize_obs=True,
)  # fmt: skip
#: ViZDoom: Atari's Adam settings with the LSTM (a 3D view needs memory), T=32. Speed
#: measured on the 2-core machine (160x120 render, 4 tics per action: ~4,000 frames/s
#: training VizdoomBasic-v1). PopArt with unclipped rewards (docs/results.md, "ViZDoom"):
#: with clipped rewards the scenarios paid every step had returns beyond the value head's
#: reach and the policy collapsed (HealthGathering ~300, below random); PopArt learns them
#: in units of their spread and keeps the death penalty's size (HealthGathering 1,771 and
#: 1,785 at 800K frames, seeds 1-2, with the value started at the mean return) and
#: DefendCenter is no worse (4.0 and 4.5); Basic no longer collapses but IMPALA's loss does
#: not learn it (-157 and -139; random -190), APPO's does (`gazelle.algorithms.appo`: APPO
#: is the family's default algorithm; docs/results.md).
IMPALA_PRESETS["gazelle"]["vizdoom"].update(
    envs_per_actor=8, batch_size=8, unroll_length=32, optimizer="adam", learning_rate=0.0006,
    epsilon=1e-8, entropy_cost=0.01, total_frames=20_000_000, use_lstm=True, popart=True,
    reward_clipping="none",
)  # fmt: skip
#: Image families with the LSTM: a layer norm on the core's input (`--core-input-norm`). An
#: unbounded ReLU torso's output grows under Adam, and a plain LSTM turns a grown input
#: into saturated gates that pass no gradient back: Pong's deep torso + LSTM (B=32) grew
#: its output 600-3,400x in 250K frames, 98-100% of the gates saturated and the torso's
#: gradient fell to ~1e-8 (the GPU check's stall); with the norm 1-4% and a live gradient.
#: It also learned sooner where the LSTM is the default: ViZDoom HealthGathering (APPO)
#: reached 1,500 at 371K and 379K frames against 551K and 561K, BabyAI 0.8 at 261K and
#: 306K against neither seed by 700K (docs/notes/lstm.md, "The deep LSTM's stall"; results
#: R11-R14). Vector tasks keep the seed's core: the MLP torso's tanh bounds its output.
for _family in ("atari", "dmlab", "image", "vizdoom"):
    IMPALA_PRESETS["gazelle"][_family].update(core_input_norm=True)
for _families in IMPALA_PRESETS.values():
    for _values in _families.values():
        _values.setdefault("vtrace_lambda", 1.0)  # the seed's V-trace
        _values.setdefault("normalize_advantages", False)  # the seed's advantages
        _values.setdefault("popart", False)  # the seed's value head and advantages
        _values.setdefault("reward_clipping", "abs_one")  # the seed's
        _values.setdefault("init", "seed")  # the seed's Sonnet initialisation
        _values.setdefault("subtract_background", False)  # the seed's frames / 255
        _values.setdefault("lstm_lr_scale", 1.0)  # the seed's: one rate for every layer
        _values.setdefault("core_input_norm", False)  # the seed's core
