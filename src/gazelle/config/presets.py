"""Presets: the values of the fields a user leaves unset, per env family and preset name.

`resolve(config, env)` fills every `None` field of a `Config` from, in order: what the env id
itself implies (an Atari id's protocol), the algorithm's preset for the env family, and
gazelle's machine-dependent rules (torso, actors). All it knows of the env is what
`gazelle.envs.probe` found (`EnvProbe`): its kind, its frames, its protocol. The resolved
config is what a run saves in its logdir, so `config.json` always shows every value that
ran.

IMPALA presets (`--preset`):

- `gazelle` (default): values measured to learn fast on the project's machines; every
  difference from the paper is justified by a run in docs/results.md;
- `impala-paper`: the IMPALA paper's Atari learner settings (its Table G.1: RMSProp as in
  TF with epsilon 0.01, lr 0.0006, entropy 0.01, B=32, T=20) and the IMPALA seed's DMLab
  defaults. Not the paper's actors (this machine's layout), torso (`auto`) or frame budget
  (50M for Atari is gazelle's): docs/usage.md lists what it does not reproduce.

A3C presets (`A3C_PRESETS`, `--algo a3c --preset`):

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
import os
from typing import TYPE_CHECKING, Any

from gazelle.config.core import Config

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe

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
#: ViZDoom: Atari's Adam settings with the LSTM (a 3D view needs memory), T=32. Speed
#: measured on the 2-core machine (160x120 render, 4 tics per action: ~4,000 frames/s
#: training VizdoomBasic-v1). PopArt with unclipped rewards (docs/results.md, "ViZDoom"):
#: with clipped rewards the scenarios paid every step had returns beyond the value head's
#: reach and the policy collapsed (HealthGathering ~300, below random); PopArt learns them
#: in units of their spread and keeps the death penalty's size (HealthGathering 1,771 and
#: 1,785 at 800K frames, seeds 1-2, with the value started at the mean return) and
#: DefendCenter is no worse (4.0 and 4.5); Basic no longer collapses but IMPALA's loss does
#: not learn it (-157 and -139; random -190), APPO's does (`FAMILY_ALGOS`: APPO is the
#: family's default algorithm; docs/results.md).
IMPALA_PRESETS["gazelle"]["vizdoom"].update(
    envs_per_actor=8, batch_size=8, unroll_length=32, optimizer="adam", learning_rate=0.0006,
    epsilon=1e-8, entropy_cost=0.01, total_frames=20_000_000, use_lstm=True, popart=True,
    reward_clipping="none",
)  # fmt: skip
PRESET_NAMES = tuple(IMPALA_PRESETS)
for _families in IMPALA_PRESETS.values():
    for _values in _families.values():
        _values.setdefault("vtrace_lambda", 1.0)  # the seed's V-trace
        _values.setdefault("normalize_advantages", False)  # the seed's advantages
        _values.setdefault("popart", False)  # the seed's value head and advantages
        _values.setdefault("reward_clipping", "abs_one")  # the seed's
        _values.setdefault("init", "seed")  # the seed's Sonnet initialisation
        _values.setdefault("subtract_background", False)  # the seed's frames / 255

#: APPO: the IMPALA preset of the same family and name, then these. Several passes per
#: batch (epochs x minibatches optimiser steps), PPO's clip on the ratio to the actors'
#: policy, advantages normalised per minibatch (so the entropy weight is PPO's 0.01) and
#: V-trace's lambda 0.95 (GAE's usual value) for lower-variance targets.
APPO_PRESETS: dict[str, dict[str, Any]] = {
    family: dict(epochs=2, minibatches=2, clip_ratio=0.1, normalize_advantages=True,
                 vtrace_lambda=0.95, entropy_cost=0.01, learning_rate=0.0003,
                 optimizer="adam", epsilon=1e-8)
    for family in ("vector", "atari", "dmlab", "image", "vizdoom")
}  # fmt: skip
#: ViZDoom: PopArt (the IMPALA preset's) already puts the advantages in units of the returns'
#: spread; normalising them per minibatch as well froze HealthGathering at 284 with IMPALA's
#: loss (every game ended at the same tic), and without it APPO reached 1,707 at 800K frames
#: (docs/results.md, "ViZDoom").
APPO_PRESETS["vizdoom"].update(normalize_advantages=False)

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
    "vizdoom": 20_000_000,
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
A3C_PRESETS["gazelle"]["vector"].update(
    envs_per_actor=4, learning_rate=2e-3, learning_rate_decay=True, grad_norm_clip=math.inf,
    use_lstm=False, end_rollout_at_episode_end=False,
)  # fmt: skip
for _families in A3C_PRESETS.values():
    for _values in _families.values():
        _values.setdefault("subtract_background", False)  # the starter agent's frames / 255
A3C_PRESET_NAMES = tuple(A3C_PRESETS)


#: The algorithm of a run that names none (`--algo` unset), per env family: APPO on ViZDoom,
#: IMPALA elsewhere. On VizdoomBasic-v1 IMPALA's loss stayed at random play's level (-123 to
#: -180 at 800K frames over 9 probes: 2 seeds, LSTM or not, lr 3e-4, lambda 0.95, entropy
#: 0.03, B=4 x T=16, rewards scaled instead of PopArt) while APPO's two epochs x two
#: minibatches learned it (+21 and +41, seeds 1-2); APPO with one pass over each batch did
#: not (-135), so it is the reuse of each batch. DefendCenter learned as fast either way
#: (4.1 against 4.0 and 4.5); HealthGathering ~10% lower at 800K frames (1,699 and 1,501
#: against 1,771 and 1,785) and level after 30 minutes (1,705 against 1,740); 30 minutes of
#: DefendCenter: 21.3 against 19.0 (docs/results.md, "ViZDoom").
FAMILY_ALGOS = {"vizdoom": "appo"}


def default_algo(env: str, preset: str | None = None) -> str:
    """`--algo` left unset: the algorithm a named `preset` belongs to (impala-paper: impala,
    universe-starter: a3c), else the family's (`FAMILY_ALGOS`) when every level of the `env`
    spec is of that family, else impala. A spec that does not resolve gets impala here; the
    run's own checks then name what is wrong with it."""
    from gazelle.envs import registry

    # why: a preset other than gazelle's is one algorithm's (the paper's IMPALA, the seed's
    # A3C); the family's algorithm would run it as another's, or refuse it.
    if preset in IMPALA_PRESETS and preset != "gazelle":
        return "impala"
    if preset in A3C_PRESETS and preset != "gazelle":
        return "a3c"
    try:
        kinds = {registry.resolve(level).kind for level in registry.expand_levels(env)}
    except (ValueError, ImportError):
        return "impala"
    return FAMILY_ALGOS.get(kinds.pop(), "impala") if len(kinds) == 1 else "impala"


def env_family(env: EnvProbe) -> str:
    """Preset family of a probed env: atari, dmlab, vizdoom, image or vector."""
    if env.kind in ("atari", "dmlab", "vizdoom"):
        return env.kind
    return "image" if env.obs_spec.is_image else "vector"


def default_num_actors(num_levels: int = 1, cores: int | None = None) -> int:
    """Actors for `--num-actors` left unset: every core but the learner's, at least 2 (so a
    2-core laptop still overlaps acting with learning) and one per level."""
    cores = cores or os.cpu_count() or 1
    return max(2, cores - 1, num_levels)


def default_slots_per_env(
    num_actors: int, envs_per_actor: int, batch_size: int, backend: str = "local"
) -> int:
    """`--slots-per-env` left unset: 1 where the actors' envs hold a whole batch plus one
    actor's next unroll (one actor then acts while a batch waits for the learner), else 2.

    When the learner is the bottleneck every slot fills, so the slots set the policy lag:
    about `num_actors * slots_per_env * envs_per_actor / batch_size` updates. One actor needs
    2 (it acts while the learner trains on its last unroll); with several, a second slot
    only adds lag: the seed's actors hold one finished unroll each. Breakout, 2 actors x 32
    envs, B=8, 2 seeds: a median lag of 8 updates with 1 slot against 16 with 2, the same
    return per frame, 5% more frames/s (docs/results.md). Ray keeps 2: an actor with one
    call would idle for each round trip (not measured)."""
    fits = num_actors * envs_per_actor >= batch_size + envs_per_actor
    return 1 if fits and backend != "ray" else 2


def default_torso(frame_is_image: bool, cuda: bool) -> str:
    """`--model auto`: mlp for vectors; for images the IMPALA ResNet (deep) on a GPU, the
    shallow IMPALA torso on a CPU, where the deep one trains ~7x slower (docs/performance.md)."""
    if not frame_is_image:
        return "mlp"
    return "deep" if cuda else "shallow"


def resolve(config: Config, env: EnvProbe, cuda: bool = False) -> Config:
    """Fill the fields left None (see the module docstring) for the env `gazelle.envs.probe`
    found; `cuda`: the learner's device."""
    family = env_family(env)
    frame_is_image = env.obs_spec.is_image
    defaults: dict[str, Any] = {"sticky_actions": False, "life_loss": False}
    if config.algo in ("impala", "appo"):
        preset = config.algorithm.preset
        if preset not in IMPALA_PRESETS:
            from gazelle.config.errors import ConfigError

            raise ConfigError("preset", preset, " | ".join(PRESET_NAMES))
        defaults.update(IMPALA_PRESETS[preset][family])
        if config.algo == "appo":
            defaults.update(APPO_PRESETS[family])
    elif config.algo == "a3c":
        preset = config.a3c.preset
        if preset not in A3C_PRESETS:
            from gazelle.config.errors import ConfigError

            raise ConfigError("preset", preset, " | ".join(A3C_PRESET_NAMES))
        defaults.update(A3C_PRESETS[preset][family])
    defaults.update(env.env_defaults)
    updates = {k: v for k, v in defaults.items() if config.get(k) is None}
    if config.model.torso == "auto":
        updates["model"] = default_torso(frame_is_image, cuda)
        if config.algo == "a3c" and frame_is_image:
            updates["model"] = "universe"  # the seed's conv torso
    return config.replace(**updates)
