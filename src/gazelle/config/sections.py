"""The sections of a run's configuration: typed, frozen, one docstring per field.

A `Config` holds one section per concern (env, model, actors, run), here, and one per
algorithm, declared in the algorithm's folder (`gazelle.algorithms.impala.settings`) and
found through `gazelle.config.registry` (`algo` names the one that runs). Every field is
one flag of `gazelle train`, named after the field (`--batch-size` for `batch_size`) unless
its metadata names the flag (`EnvConfig.id` is `--env`, `ModelConfig.torso` is `--model`).
Flag names are unique across the common sections; algorithm sections may share names
(`--learning-rate` sets the learning rate of the algorithm that runs).

Fields left `None` are filled by `gazelle.config.resolve` from the env family's preset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def flag_field(flag: str, default: object) -> object:
    """A field whose flag (and flat name) is `flag` instead of the field's own name."""
    return field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class EnvConfig:
    """What the agent acts in."""

    id: str = flag_field("env", "CartPole-v1")  # type: ignore[assignment]
    """Gymnasium id, a comma-separated list (multi-task), or `dmlab30`."""
    num_action_repeats: int | None = None
    """Env frames per agent step (Atari frame skip); None: the env family's default."""
    sticky_actions: bool | None = None
    """Atari: repeat the previous action with probability 0.25 (revisited ALE protocol);
    unset: the id's protocol (ALE/*-v5 on, *NoFrameskip-v4 off)."""
    life_loss: bool | None = None
    """Atari: a lost life ends the training episode (not the logged game, never in test
    mode); unset: the id's protocol (*NoFrameskip-v4 on, ALE/*-v5 off)."""
    full_action_space: bool | None = None
    """The family's full action set in every level: Atari's 18 actions instead of each
    game's minimal set; ViZDoom: every button of any of the levels, in each (a button a
    scenario lacks does nothing there); unset: on for a multi-task --env whose levels'
    action sets differ, off otherwise."""
    doom_actions: str | None = None
    """ViZDoom: single (a no-op and one button at a time), combos (one head per group of
    exclusive buttons, per other button and per delta button: buttons pressed together) or
    registered (as the id's max_buttons_pressed: single for the -v1 ids, combos for the
    -MultiBinary-v1 and Doom/Freedoom map ids); unset: single, the measured default (combos
    was not as good on Basic, 0 of 2 seeds to 75 in 800K frames against 1 of 2, nor on
    DefendCenter, 0 of 2 to 8 in 1.5M against 2 of 2, and level on HealthGathering:
    docs/notes/vizdoom-actions.md)."""
    atari_frames: str | None = None
    """Atari preprocessing: deepmind (84x84, 4 stacked, max-pooled: IMPALA's) or universe
    (one 42x42 frame of the playing field: the A3C seed's); unset: the algorithm's."""
    raw_obs: bool = False
    """The env's own observations through the generic adapter instead of its family's
    preprocessing: MiniGrid's Dict (image, direction, mission) instead of BabyAI's frame and
    instruction, ViZDoom's own env (screen, gamevariables), Atari's RGB screen."""
    image_layout: str = "auto"
    """How the generic adapter reads image observations (Gymnasium ids, --raw-obs): auto
    (from the shape: the channel axis is the short one, first or last; a one-line warning
    where that is ambiguous, e.g. 8x8x8, and the guess is HWC), hwc or chw (every image)."""
    obs_flicker: float = 0.0
    """The chance that each observation is blanked (every numeric field at 0; the reward,
    the episode's end and an instruction kept), in training and in `gazelle test`: any env
    made partially observed, to test whether an agent uses its memory (Hausknecht & Stone
    2015's flickering Atari used 0.5); 0: off."""


@dataclass(frozen=True)
class ModelConfig:
    """The agent's network."""

    torso: str = flag_field("model", "auto")  # type: ignore[assignment]
    """Torso: deep | shallow | nature | universe | mlp, a name given to
    `gazelle.register_torso`, or a `module:attr` factory path; auto = mlp for vectors; for
    images deep when the learner has a GPU, shallow on a CPU (the deep torso is 7x slower)."""
    activation: str | None = None
    """Activation of the deep, shallow, nature and universe torsos: relu or elu (no unit
    stops passing a gradient for good); unset: the torso's own (relu; universe: elu, the
    starter agent's). Other torsos take none (mlp has tanh)."""
    subtract_background: bool | None = None
    """The image torsos take each frame with its background (each channel's most common
    byte) at 0: `(frame - background) / 255`, so that a screen's constant colour drives no
    unit (on Pong's grey the shallow torso lost most of its units without it); frames with
    a black background are unchanged. Unset: the preset's (on for Atari with IMPALA and
    APPO)."""
    core_input_norm: bool | None = None
    """The LSTM core's input (torso features, last reward and action) goes through a layer
    norm, so the gates see an input of unit scale however large the torso's output grows.
    Without it, Pong's deep torso + LSTM (IMPALA, Adam) had 0.98 of its gates saturated
    within 60K frames, the torso's output grew 600x by 250K and its gradient fell to ~1e-8
    (docs/notes/lstm.md, "The deep LSTM's stall"). Unset: the preset's (on for the image
    families with IMPALA and APPO, where ViZDoom and BabyAI also learned sooner with it;
    off for vector tasks, whose MLP torso's tanh bounds its output, for A3C and for the
    impala-paper preset: the seeds' agents)."""
    use_lstm: bool | None = None
    """LSTM core (256) after the torso; off gives a feed-forward agent; unset: the env
    family's preset (off for vector observations: turn it on for a task with hidden state;
    off for Atari with IMPALA/APPO, whose 4 stacked frames carry the motion; on elsewhere,
    and on Atari with A3C, as the starter agent)."""
    use_instruction: bool = True
    """Feed the env's instruction text to the language encoder (off: ablation)."""
    withhold_obs: str | None = None
    """Observation keys the agent is not given, comma-separated (an ablation: what it
    learns without them); the env still makes them, nothing stores or encodes them."""
    init: str | None = None
    """Initial weights: seed (the IMPALA seed's Sonnet initialisation: truncated normal
    1/sqrt(fan_in), zero biases, LSTM forget bias 1), universe (the A3C starter agent's:
    Glorot-uniform convs and LSTM, heads with normalised columns of norm 0.01 for the
    logits and 1.0 for the value) or torch (torch's defaults); unset: the preset's (seed,
    but universe with --algo a3c --preset universe-starter)."""
    log_std: str = "parameter"
    """Continuous actions (a float Box action space): the Gaussian policy's log-stds are a
    learned parameter, the same in every state (parameter, as PPO's continuous policy), or
    outputs of the policy head (state)."""
    initial_log_std: float = 0.0
    """Continuous actions: the Gaussian's log-std at the start, in units of half each
    bounded dimension's range (0: a std of half the range)."""
    action_bounds: str = "clip"
    """Continuous actions: how a Gaussian sample reaches a bounded Box: clip (to [-1, 1],
    then scaled onto the bounds) or tanh (squashed); the importance ratios are computed on
    the sample itself either way, and an unbounded dimension takes the sample as it is."""
    normalize_obs: bool | None = None
    """Vector observations scaled by the running mean and std of what the learner has seen,
    clipped to +-5, before their encoder (the statistics travel with the weights and into
    checkpoints); unset: the preset's (on in IMPALA's and APPO's control presets: a float Box
    action and vector observations). IMPALA and APPO only: their
    learner moves the statistics once per batch; A3C, whose workers compute their own
    gradients, refuses it (nothing would move them)."""

    separate_value: bool | None = None
    """The value head reads a network of its own (a second copy of the torso, or of every
    field's encoder) instead of the policy's, as PPO's continuous-control agents do;
    feed-forward agents only (--no-use-lstm); unset: the preset's (on in APPO's control
    preset, off elsewhere)."""

    def agent_options(self) -> dict[str, Any]:
        """The keywords every copy of the agent is built with (`gazelle.models.build_agent`:
        learner, actors, inference server, test mode, benchmarks)."""
        return {
            "activation": self.activation,
            "subtract_background": bool(self.subtract_background),
            "log_std": self.log_std,
            "initial_log_std": float(self.initial_log_std),
            "normalize_obs": bool(self.normalize_obs),
            "separate_value": bool(self.separate_value),
            "core_input_norm": bool(self.core_input_norm),
        }


@dataclass(frozen=True)
class ActorConfig:
    """Where and how the actors run."""

    backend: str = "local"
    """Where actors run: local (processes on this machine, shared memory) or ray (Ray actors
    on a Ray cluster: this machine's own private instance, or --ray-address)."""
    ray_address: str | None = None
    """Ray backend: the cluster to join (HOST:PORT of a `ray start --head`, or auto); None:
    start a private Ray instance on this machine (loopback only, no dashboard)."""
    ray_actor_cpus: float = 1.0
    """Ray backend: CPUs each actor declares to Ray (the scheduler places actors by it)."""
    ray_dashboard: bool = False
    """Ray backend: start the private Ray instance with its dashboard (on 127.0.0.1:8265);
    off by default, as it lets anyone who can reach it run code on the cluster."""
    ray_allow_tokenless: bool = False
    """Ray backend: join a --ray-address cluster (or use a Ray connection made before the
    run) that answers clients without a token, with a warning; off: such a cluster is
    refused, as anyone who can reach it can run code on its nodes."""
    num_actors: int | None = None
    """Actor processes; None: IMPALA on a CPU learner measures what an agent step costs in
    acting and in learning at start-up and gives the actors their share of the cores (the
    `gazelle: layout:` line); with a GPU learner, A3C or Ray, the cores minus one (at least
    2). Always at least one per level of a multi-task --env."""
    envs_per_actor: int | None = None
    """Envs each actor steps, with their inference batched."""
    inference: str = "auto"
    """local: each actor runs its own agent copy, batched over its envs (CPU); central: one
    server on the learner's device batches all actors' requests (the seed's dynamic
    batching); auto: central when the learner runs on CUDA, else local."""
    inference_max_wait_ms: float = 2.0
    """Central inference: how long the server keeps collecting requests after the first one
    of a batch (ms)."""
    inference_max_batch: int | None = None
    """Central inference: most envs per batch (at least --envs-per-actor); None: all actors'
    envs."""
    env_groups: int | None = None
    """Central inference: each actor's envs in this many groups, each with its own request
    to the server in flight: one group steps its envs while the others wait for their
    actions (as Sample Factory's double-buffered sampling); 1: the actor waits for every
    round trip with its envs idle. Unset: 1 with local inference (no round trip to hide),
    2 with central (`DEFAULT_CENTRAL_GROUPS`; docs/performance.md, "Env groups")."""
    slots_per_env: int | None = None
    """Unroll slots per env (local: in shared memory; ray: unroll calls in flight): more
    buffering, more policy lag. None: 1 where the actors' envs hold a batch plus one
    actor's next unroll (several actors: one acts while another's unroll waits, as the
    seed's actors hold one finished unroll each), else 2 (a lone actor acts while the
    learner trains); 2 on Ray."""
    actor_timeout_s: float = 120.0
    """An actor with no sign of life (no env step, no wait) for this many seconds is taken
    to be hung (stopped, or an env that blocks forever): it is killed and replaced."""
    lockstep: bool | None = None
    """With one actor and local inference, act in lockstep with the learner (each unroll
    waits for the updates the earlier ones allow): no policy lag, and a seeded CPU run
    repeats exactly. With --num-actors unset, the layout is that one actor. Unset: the
    preset's, on in APPO's control preset (its 256-step unrolls learn from a lagging policy
    at a third of the return on Hopper), else off: actor and learner then cannot overlap
    (Pong, nature torso, one actor: 2,303 frames/s in lockstep against 4,413 free-running)."""


@dataclass(frozen=True)
class RunConfig:
    """Budget, devices, logs and checkpoints of one run."""

    logdir: str | None = None
    """Where checkpoints, TensorBoard events and progress.jsonl go; unset: a fresh folder
    runs/<env>-<YYYYmmdd-HHMMSS> (a run resumes only from a --logdir it is given)."""
    seed: int = 1
    """Seed of the learner; actor i seeds its envs from seed and i."""
    total_frames: int | None = None
    """Env frames to train for (agent steps x action repeats)."""
    max_seconds: float | None = None
    """Also stop after this many seconds of training (fixed-time runs, benchmarks)."""
    target_return: float | None = None
    """Also stop once the mean return of the last 100 episodes (over all levels) reaches
    this: a solved task stops early (time-to-score runs, learning tests)."""
    device: str = "auto"
    """Learner device: auto (cuda if present), cpu, cuda, cuda:N."""
    precision: str = "fp32"
    """Learner precision: fp32 or bf16 (autocast)."""
    learner_threads: int | None = None
    """Torch threads of the learner on CPU; None: the cores the actors leave (at least 1),
    shared among the learners with --learners N."""
    learners: int = 1
    """Data-parallel learners (IMPALA, APPO): N processes each train on 1/N of every batch
    (--batch-size, and each APPO minibatch, must divide by N) and sum their gradients
    (torch.distributed: gloo on CPU, NCCL with one GPU each), so every update is the one
    learner's on the whole batch; the first publishes weights, logs and checkpoints (with
    --backend ray it is the driver, the others Ray actors, one GPU each on CUDA). 1: one
    learner, no process group. A3C's workers already are its parallel learners (their
    number is --num-actors); docs/distributed.md."""
    learner_timeout_s: float = 120.0
    """With --learners N: the longest a learner waits for the others in a step's collective
    call (their start-up gets at least 120 s): then the run stops, naming the learner that
    died or did not answer."""
    resume: bool = True
    """Continue from logdir's checkpoint when it exists (with the same config)."""
    checkpoint_interval_s: float = 600.0
    """Seconds between checkpoints (the seed: 600)."""
    log_interval_s: float = 5.0
    """Seconds between progress rows and TensorBoard scalars."""
    batch_timeout_s: float = 300.0
    """The learner's longest wait for a batch: then the run stops, naming each actor's
    state (a warning with the same list comes at a quarter of it)."""
    max_nonfinite_updates: int = 10
    """Stop the run after this many updates in a row with a non-finite loss or gradient
    (each one is skipped, leaving weights and optimiser state untouched)."""
    quiet: bool = False
    """No progress display or per-interval lines on the console; warnings, errors and the
    final summary are still printed."""
    wandb: bool = False
    """Also log to Weights & Biases: every progress row and the resolved config (needs
    pip install 'gazelle[wandb]')."""
    wandb_project: str = "gazelle"
    """The W&B project of the run (with --wandb)."""
    wandb_mode: str | None = None
    """W&B mode (with --wandb): online, or offline (no network: files under
    <logdir>/wandb, uploaded later by wandb sync); unset: wandb's own setting (WANDB_MODE,
    else online)."""

    def folder(self) -> Path:
        """`logdir` once the run has named it (`gazelle.algorithms.common.prepare` gives an
        unset one a fresh folder, `gazelle.config.fresh_logdir`)."""
        if self.logdir is None:
            raise ValueError("logdir: unset (a run names it in prepare, before use)")
        return Path(self.logdir)


#: The common sections of `Config`, by attribute name.
COMMON_SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "model": ModelConfig,
    "actors": ActorConfig,
    "run": RunConfig,
}
