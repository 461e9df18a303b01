"""What every algorithm's builder needs: the env probe, the resolved config, the device,
seeds and threads. No algorithm, no transport here. The env's facts come from one
`gazelle.envs.probe` call, which `prepare` hands on to the presets and the layout rule."""

from __future__ import annotations

import dataclasses
import os
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gazelle.algorithms.preflight import check_logdir, check_torso
from gazelle.config import (
    Config,
    ConfigError,
    default_slots_per_env,
    fresh_logdir,
    registry,
    resolve,
    validate,
)
from gazelle.config.presets import DEFAULT_CENTRAL_GROUPS, blame_preset, env_family
from gazelle.runtime.learner import cpu_has_native_bf16
from gazelle.types import INSTRUCTION, ObsSpec

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "auto | cpu (CUDA is not available here)")
    return device


def model_words(config: Config) -> str:
    """The torso as a run's first log line names it: `shallow`, or `universe activation=relu`
    where `--activation` was given (unset: the torso's own, not named), then
    `subtract_background` where the frames' background is put at 0, and `core_input_norm`
    where the LSTM core's input is normed."""
    model = config.model
    words = model.torso + (f" activation={model.activation}" if model.activation else "")
    words += " subtract_background" if model.subtract_background else ""
    return words + (" core_input_norm" if model.use_lstm and model.core_input_norm else "")


def env_kwargs(config: Config) -> dict[str, Any]:
    """Keyword arguments of `gazelle.envs.make` from the env section."""
    env = config.env
    kwargs: dict[str, Any] = {}
    if env.num_action_repeats is not None:
        kwargs["num_action_repeats"] = env.num_action_repeats
    # why: None leaves the choice to the env id's protocol; False must reach an Atari env
    # (e.g. ALE/*-v5 without its sticky actions), and is a no-op elsewhere.
    if env.sticky_actions is not None:
        kwargs["sticky_actions"] = env.sticky_actions
    if env.life_loss is not None:
        kwargs["life_loss"] = env.life_loss
    if env.full_action_space:
        kwargs["full_action_space"] = True
        from gazelle.envs.probe import doom_buttons

        # why: a ViZDoom run acts with the union of its levels' buttons in every level.
        buttons = doom_buttons(env.id)
        if buttons is not None:
            kwargs["buttons"] = buttons
    if env.doom_actions is not None:
        kwargs["doom_actions"] = env.doom_actions
    if env.atari_frames is not None:
        kwargs["preset"] = env.atari_frames
    if env.raw_obs:
        kwargs["preset"] = "raw"  # why: every family's make takes it: the generic adapter
    if env.image_layout != "auto":
        kwargs["image_layout"] = env.image_layout
    if env.obs_flicker:
        kwargs["obs_flicker"] = env.obs_flicker
    return kwargs


def agent_obs_spec(config: Config, spec: ObsSpec) -> ObsSpec:
    """The env's obs spec less what the agent is not given: the instruction with
    --no-use-instruction, the keys of --withhold-obs."""
    withheld = [k.strip() for k in (config.model.withhold_obs or "").split(",") if k.strip()]
    if not config.model.use_instruction and spec.has_instruction:
        withheld.append(INSTRUCTION)
    if not withheld:
        return spec
    try:
        return spec.without(list(dict.fromkeys(withheld)))
    except (KeyError, ValueError) as err:
        raise ConfigError(
            "withhold_obs",
            config.model.withhold_obs,
            f"some of the observation's keys ({', '.join(spec.names)}) but not all",
        ) from err


def probe(config: Config) -> EnvProbe:
    """The env's facts (`gazelle.envs.probe`) for `config`'s env settings and algorithm;
    every distinct level of a multi-task --env must share the first one's observations and
    actions, and each level needs an actor."""
    from gazelle.envs.probe import FULL_ACTION_KINDS, LevelsDiffer
    from gazelle.envs.probe import probe as probe_env
    from gazelle.envs.registry import NotApplicable

    env = config.env.id

    def one_actor_per_level(levels: list[str]) -> None:
        num_actors = config.actors.num_actors
        if num_actors is not None and num_actors < len(levels):
            raise ConfigError(
                "num_actors",
                num_actors,
                f"at least {len(levels)}, one actor per level of --env {env}",
            )

    try:
        # why: Atari's preprocessing, which the observation shape depends on, is the
        # algorithm's own unless given (IMPALA: DeepMind's 84x84x4; A3C: the seed's 42x42).
        frames = registry.algorithm(config.algo).atari_frames
        kwargs = {**env_kwargs(config), "full_action_space": config.env.full_action_space}
        return probe_env(env, frames, one_actor_per_level, **kwargs)
    except LevelsDiffer as err:
        full = err.kind in FULL_ACTION_KINDS and err.what == "actions"
        hint = " (one action set for all: --full-action-space)" if full else ""
        raise ConfigError("env", env, f"{err}{hint}") from err
    except ConfigError:
        raise  # why: one_actor_per_level's, already naming its flag
    except NotApplicable as err:
        raise ConfigError(err.setting, config.get(err.setting), err.allowed) from err
    except (ValueError, KeyError, ImportError) as err:
        raise ConfigError("env", env, f"an env gazelle can make ({err})") from err


def prepare(config: Config) -> tuple[Config, EnvProbe, torch.device]:
    """Validate, probe the env, resolve every unset field; seed the learner's RNGs."""
    validate(config)
    found = probe(config)
    raw = config.env.raw_obs  # why: Atari's frames are then "raw", not a preprocessing
    if config.env.atari_frames is None and found.atari_frames is not None and not raw:
        config = config.replace(atari_frames=found.atari_frames)
    if config.env.full_action_space is None:
        config = config.replace(full_action_space=found.full_action_space)
    if config.env.doom_actions is None and found.kind == "vizdoom" and not raw:
        from gazelle.envs.vizdoom import DEFAULT_DOOM_ACTIONS

        # why: saved resolved, so that a later default cannot change a run's actions.
        config = config.replace(doom_actions=DEFAULT_DOOM_ACTIONS)
    device = resolve_device(config.run.device)
    if config.run.precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        print(
            "gazelle: warning: --precision bf16 on a CPU without bf16 hardware (AVX512-BF16 "
            "or AMX): torch emulates it, 13x slower than fp32 on the deep torso; use fp32"
        )
    given, config = config, resolve(config, found, cuda=device.type == "cuda")
    if config.run.logdir is None:
        # why: the one default rule (`fresh_logdir`), for runs started from Python too
        config = config.replace(logdir=fresh_logdir(config.env.id))
    try:
        validate(config)
    except ConfigError as err:
        raise blame_preset(err, given, config, found) from None
    check_torso(config, found.obs_spec)
    check_logdir(config)
    if config.actors.inference == "auto":
        # why: as in the seed, dynamic batching when the learner has a GPU (one big batch on
        # the device instead of every actor running the net on a CPU core); on CPU the
        # actors' own copies avoid a round trip per step.
        config = config.replace(inference="central" if device.type == "cuda" else "local")
    central = config.actors.inference == "central"
    if config.actors.env_groups is None:
        envs = int(config.actors.envs_per_actor or 1)
        config = config.replace(env_groups=min(DEFAULT_CENTRAL_GROUPS, envs) if central else 1)
    elif config.actors.env_groups > 1 and not central:
        raise ConfigError(
            "env_groups",
            config.actors.env_groups,
            "1 with --inference local (the learner is not on a GPU, so auto picked local); "
            "more with --inference central",
        )
    found = dataclasses.replace(found, obs_spec=agent_obs_spec(config, found.obs_spec))
    from gazelle.algorithms.layout import choose_num_actors, lockstep_blocked

    if config.actors.num_actors is None:
        num_actors, why = choose_num_actors(config, found, device)
        print(why)
        config = config.replace(num_actors=num_actors)
    if config.actors.slots_per_env is None:
        actors, envs = int(config.actors.num_actors or 1), int(config.actors.envs_per_actor or 1)
        batch = getattr(config.algorithm, "batch_size", None)  # A3C: none
        slots = default_slots_per_env(actors, envs, int(batch or 1), config.actors.backend)
        config = config.replace(slots_per_env=slots)
        if batch:
            print(
                f"gazelle: {slots} unroll slot{'s' if slots > 1 else ''} per env: "
                f"{actors * envs} envs for batches of {batch} (--slots-per-env to choose)"
            )
    if (blocked := lockstep_blocked(config, len(found.levels))) is not None:
        preset = getattr(config.algorithm, "preset", None)
        source = (
            ""
            if given.actors.lockstep
            else f" ({config.algo}'s {preset} preset for {env_family(found)} envs)"
        )
        print(
            f"gazelle: warning: --lockstep{source} does not act in this run: {blocked}; the "
            "actors run free, their policy lagging the learner's (--no-lockstep to say so)"
        )
    seed = config.run.seed
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds the global RNG that envs may use
    torch.manual_seed(seed)
    return config, found, device


def learner_threads(config: Config, device: torch.device) -> None:
    """On CPU, the learner gets the cores the actors leave (at least one) instead of torch's
    default of all cores, which oversubscribes the machine."""
    if device.type == "cpu":
        cores = os.cpu_count() or 1
        threads = config.run.learner_threads or cores - int(config.actors.num_actors or 1)
        torch.set_num_threads(max(1, threads))
