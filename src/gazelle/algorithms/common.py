"""What every algorithm's builder needs: the env probe, the resolved config, the device,
seeds and threads. No algorithm, no transport here."""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import numpy as np
import torch

from gazelle.algorithms.preflight import check_logdir, check_torso
from gazelle.config import (
    Config,
    ConfigError,
    resolve,
    validate,
)
from gazelle.runtime.learner import cpu_has_native_bf16
from gazelle.types import ObsSpec


@dataclasses.dataclass(frozen=True)
class EnvProbe:
    """What one look at the env tells a builder."""

    levels: list[str]
    obs_spec: ObsSpec
    action_repeats: int
    kind: str


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", name, "auto | cpu (CUDA is not available here)")
    return device


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
    if env.atari_frames is not None:
        kwargs["preset"] = env.atari_frames
    return kwargs


def probe(config: Config) -> EnvProbe:
    """Levels, observation spec, action repeats and env kind; every distinct level of a
    multi-task --env must share the first one's observations and actions."""
    from gazelle.envs import default_action_repeats, expand_levels
    from gazelle.envs.registry import resolve as resolve_env

    env = config.env.id
    try:
        levels = expand_levels(env, test_mode=False)
        kind = "dmlab" if levels[0].startswith("dmlab:") else resolve_env(levels[0]).kind
    except (ValueError, KeyError, ImportError) as err:
        raise ConfigError("env", env, f"an env gazelle can make ({err})") from err
    num_actors = config.actors.num_actors
    if num_actors is not None and num_actors < len(levels):
        raise ConfigError(
            "num_actors", num_actors, f"at least {len(levels)}, one actor per level of --env {env}"
        )
    spec = _level_spec(config, levels[0])
    # why: one agent serves every level, so its input and policy head must fit them all.
    # DMLab levels share one observation config by construction (and load slowly).
    for level in dict.fromkeys(levels[1:]) if kind != "dmlab" else ():
        other = _level_spec(config, level)
        if other != spec:
            hint = " (Atari games: add --full-action-space)" if kind == "atari" else ""
            raise ConfigError(
                "env",
                env,
                f"levels with the same observations and actions; {levels[0]} has "
                f"{_describe(spec)}, {level} has {_describe(other)}{hint}",
            )
    repeats = config.env.num_action_repeats or default_action_repeats(levels[0])
    return EnvProbe(levels, spec, repeats, kind)


def env_defaults(kind: str, level: str) -> dict[str, Any]:
    """Config fields that the env id itself implies (the Atari protocol of the id)."""
    if kind != "atari":
        return {}
    from gazelle.envs.registry import atari_protocol

    protocol = atari_protocol(level)
    return {"sticky_actions": protocol.sticky_actions, "life_loss": protocol.life_loss}


def _level_spec(config: Config, level: str) -> ObsSpec:
    from gazelle.envs import make, obs_spec

    try:
        env = make(level, seed=0, **env_kwargs(config))
    except (ValueError, KeyError, ImportError) as err:
        raise ConfigError("env", config.env.id, f"an env gazelle can make ({err})") from err
    try:
        return obs_spec(env)
    finally:
        env.close()


def _describe(spec: ObsSpec) -> str:
    text = f"frames {spec.frame_shape} {spec.frame_dtype} and {spec.num_actions} actions"
    return text + (" with instructions" if spec.has_instruction else "")


def prepare(config: Config) -> tuple[Config, EnvProbe, torch.device]:
    """Validate, probe the env, resolve every unset field; seed the learner's RNGs."""
    validate(config)
    config = _atari_frames(config)
    found = probe(config)
    device = resolve_device(config.run.device)
    if config.run.precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        print(
            "gazelle: warning: --precision bf16 on a CPU without bf16 hardware (AVX512-BF16 "
            "or AMX): torch emulates it, 13x slower than fp32 on the deep torso; use fp32"
        )
    config = resolve(
        config,
        found.obs_spec.is_image,
        found.kind,
        env_defaults(found.kind, found.levels[0]),
        cuda=device.type == "cuda",
    )
    validate(config)
    check_torso(config, found.obs_spec)
    check_logdir(config)
    if config.actors.inference == "auto":
        # why: as in the seed, dynamic batching when the learner has a GPU (one big batch on
        # the device instead of every actor running the net on a CPU core); on CPU the
        # actors' own copies avoid a round trip per step.
        config = config.replace(inference="central" if device.type == "cuda" else "local")
    if not config.model.use_instruction:
        found = dataclasses.replace(
            found, obs_spec=dataclasses.replace(found.obs_spec, has_instruction=False)
        )
    if config.actors.num_actors is None:
        from gazelle.algorithms.layout import choose_num_actors

        num_actors, why = choose_num_actors(config, found, device)
        print(why)
        config = config.replace(num_actors=num_actors)
    seed = config.run.seed
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds the global RNG that envs may use
    torch.manual_seed(seed)
    return config, found, device


def _atari_frames(config: Config) -> Config:
    """Atari's preprocessing, which the probe's observation shape depends on: the
    algorithm's own (IMPALA: DeepMind's 84x84x4; A3C: the seed's 42x42) unless given."""
    if config.env.atari_frames is not None:
        return config
    from gazelle.envs import expand_levels
    from gazelle.envs.registry import resolve as resolve_env

    try:
        first = expand_levels(config.env.id)[0]
        atari = not first.startswith("dmlab:") and resolve_env(first).kind == "atari"
    except (ValueError, KeyError, ImportError):
        return config  # the probe names the problem
    if not atari:
        return config
    return config.replace(atari_frames="universe" if config.algo == "a3c" else "deepmind")


def learner_threads(config: Config, device: torch.device) -> None:
    """On CPU, the learner gets the cores the actors leave (at least one) instead of torch's
    default of all cores, which oversubscribes the machine."""
    if device.type == "cpu":
        cores = os.cpu_count() or 1
        threads = config.run.learner_threads or cores - int(config.actors.num_actors or 1)
        torch.set_num_threads(max(1, threads))
