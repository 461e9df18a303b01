"""Builds every object of an IMPALA run from a config: envs probe, agent, optimiser,
learner, shared buffers and params, actors. `impala.train` then only runs the loop."""

from __future__ import annotations

import copy
import dataclasses
import os
import random
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from gazelle.backends.local import LocalActors
from gazelle.config import ConfigError, ImpalaConfig, default_num_actors, resolve, validate
from gazelle.models import Agent
from gazelle.optim import make_optimizer
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.buffers import SlotLayout, UnrollBuffers
from gazelle.runtime.inference import InferenceChannels, InferenceServer
from gazelle.runtime.learner import Learner, LossSettings
from gazelle.runtime.params import ParamStore
from gazelle.types import ObsSpec

CORE_SIZE = 256


@dataclasses.dataclass
class RunSetup:
    config: ImpalaConfig
    levels: list[str]
    obs_spec: ObsSpec
    action_repeats: int
    device: torch.device
    agent: torch.nn.Module
    optimizer: torch.optim.Optimizer
    learner: Learner
    buffers: UnrollBuffers
    params: ParamStore
    actors: LocalActors

    # The resolved numbers every loop needs (never None after `resolve`).
    @property
    def batch_size(self) -> int:
        return int(self.config.batch_size or 0)

    @property
    def unroll_length(self) -> int:
        return int(self.config.unroll_length or 0)

    @property
    def total_frames(self) -> int:
        return int(self.config.total_frames or 0)

    @property
    def learning_rate(self) -> float:
        return float(self.config.learning_rate or 0.0)

    def scores(self, logger: Any) -> dict[str, float]:
        """Human-normalised scores over the levels' recent returns (Atari / DMLab-30), when
        every level is in a score table and has returns; {} otherwise."""
        from gazelle.envs import scores

        returns = {level: list(values) for level, values in logger.level_returns().items()}
        if len(returns) < len(self.levels) or not all(returns.values()):
            return {}
        try:
            no_cap = scores.compute_human_normalized_score(returns, per_level_cap=None)
            cap = scores.compute_human_normalized_score(returns, per_level_cap=100)
        except (KeyError, ValueError):
            return {}
        return {"scores/human_normalized_no_cap": no_cap, "scores/human_normalized_cap_100": cap}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"--device: {name!r} asked for, but CUDA is not available here; allowed: auto | cpu"
        )
    return device


def env_kwargs(config: ImpalaConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if config.num_action_repeats is not None:
        kwargs["num_action_repeats"] = config.num_action_repeats
    # why: None leaves the choice to the env id's protocol; False must reach an Atari env
    # (e.g. ALE/*-v5 without its sticky actions), and is a no-op elsewhere.
    if config.sticky_actions is not None:
        kwargs["sticky_actions"] = config.sticky_actions
    if config.life_loss is not None:
        kwargs["life_loss"] = config.life_loss
    if config.full_action_space:
        kwargs["full_action_space"] = True
    return kwargs


def probe(config: ImpalaConfig) -> tuple[list[str], ObsSpec, int, str]:
    """Levels, observation spec, action repeats and env kind; every distinct level of a
    multi-task --env must share the first one's observations and actions."""
    from gazelle.envs import default_action_repeats, expand_levels
    from gazelle.envs.registry import resolve as resolve_env

    try:
        levels = expand_levels(config.env, test_mode=False)
        kind = "dmlab" if levels[0].startswith("dmlab:") else resolve_env(levels[0]).kind
    except (ValueError, KeyError, ImportError) as err:
        raise ConfigError("env", config.env, f"an env gazelle can make ({err})") from err
    if config.num_actors is not None and config.num_actors < len(levels):
        raise ConfigError(
            "num_actors",
            config.num_actors,
            f"at least {len(levels)}, one actor per level of --env {config.env}",
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
                config.env,
                f"levels with the same observations and actions; {levels[0]} has "
                f"{_describe(spec)}, {level} has {_describe(other)}{hint}",
            )
    repeats = config.num_action_repeats or default_action_repeats(levels[0])
    return levels, spec, repeats, kind


def env_defaults(kind: str, level: str) -> dict[str, Any]:
    """Config fields that the env id itself implies (the Atari protocol of the id)."""
    if kind != "atari":
        return {}
    from gazelle.envs.registry import atari_protocol

    protocol = atari_protocol(level)
    return {"sticky_actions": protocol.sticky_actions, "life_loss": protocol.life_loss}


def _level_spec(config: ImpalaConfig, level: str) -> ObsSpec:
    from gazelle.envs import make, obs_spec

    try:
        env = make(level, seed=0, **env_kwargs(config))
    except (ValueError, KeyError, ImportError) as err:
        raise ConfigError("env", config.env, f"an env gazelle can make ({err})") from err
    try:
        return obs_spec(env)
    finally:
        env.close()


def _describe(spec: ObsSpec) -> str:
    text = f"frames {spec.frame_shape} {spec.frame_dtype} and {spec.num_actions} actions"
    return text + (" with instructions" if spec.has_instruction else "")


def prepare(config: ImpalaConfig) -> RunSetup:
    validate(config)
    levels, spec, repeats, kind = probe(config)
    config = validate(resolve(config, spec.is_image, kind, env_defaults(kind, levels[0])))
    if config.num_actors is None:
        config = dataclasses.replace(config, num_actors=default_num_actors(len(levels)))
    if config.inference == "auto":
        # why: as in the seed, dynamic batching when the learner has a GPU (one big batch on
        # the device instead of every actor running the net on a CPU core); on CPU the
        # actors' own copies avoid a round trip per step.
        cuda = resolve_device(config.device).type == "cuda"
        config = dataclasses.replace(config, inference="central" if cuda else "local")
    if not config.use_instruction:
        spec = dataclasses.replace(spec, has_instruction=False)
    assert config.batch_size and config.unroll_length and config.envs_per_actor
    assert config.num_actors
    assert config.learning_rate and config.epsilon is not None
    assert config.entropy_cost is not None and config.total_frames
    random.seed(config.seed)
    np.random.seed(config.seed)  # noqa: NPY002 - seeds the global RNG that envs may use
    torch.manual_seed(config.seed)
    device = resolve_device(config.device)
    keep_freed_memory()  # why: the learner reallocates its big activations every step
    if device.type == "cpu":
        # why: the actors run one thread each; the learner gets the cores left (at least one)
        # instead of torch's default of all cores, which oversubscribes the machine.
        threads = config.learner_threads or (os.cpu_count() or 1) - config.num_actors
        torch.set_num_threads(max(1, threads))
    agent = Agent(spec, torso=config.model, use_lstm=config.use_lstm, core_size=CORE_SIZE)
    agent.to(device)
    optimizer = make_optimizer(
        config.optimizer,
        agent.parameters(),
        lr=config.learning_rate,
        decay=config.decay,
        momentum=config.momentum,
        eps=config.epsilon,
    )
    settings = LossSettings(
        config.discounting,
        config.baseline_cost,
        config.entropy_cost,
        config.reward_clipping,
        config.grad_norm_clip,
    )
    learner = Learner(agent, optimizer, settings, device, config.precision)
    ctx = mp.get_context("spawn")
    layout = SlotLayout(config.unroll_length, spec, CORE_SIZE if config.use_lstm else 0)
    slots_per_actor = config.envs_per_actor * config.slots_per_env
    buffers = UnrollBuffers(layout, config.num_actors, slots_per_actor, ctx)
    if buffers.num_slots < config.batch_size:
        raise ValueError(
            f"--batch-size: {config.batch_size} unrolls per batch, but the actors hold only "
            f"{buffers.num_slots} (num_actors x envs_per_actor x slots_per_env); allowed: at "
            f"most {buffers.num_slots}, or raise --num-actors / --envs-per-actor"
        )
    params = ParamStore(agent, ctx)
    specs = [
        ActorSpec(
            actor_id=i,
            level=levels[i % len(levels)],  # round-robin over levels, as the seed
            level_id=i % len(levels),
            envs_per_actor=config.envs_per_actor,
            unroll_length=config.unroll_length,
            obs_spec=spec,
            torso=config.model,
            use_lstm=config.use_lstm,
            seed=config.seed * 1_000_003 + 1000 * i,
            env_kwargs=env_kwargs(config),
        )
        for i in range(config.num_actors)
    ]
    actors = _actors(config, specs, buffers, params, agent, device, ctx)
    return RunSetup(
        config, levels, spec, repeats, device, agent, optimizer, learner, buffers, params, actors
    )


def _actors(
    config: ImpalaConfig,
    specs: list[ActorSpec],
    buffers: UnrollBuffers,
    params: ParamStore,
    agent: Agent,
    device: torch.device,
    ctx: Any,
) -> LocalActors:
    """The actor processes, with the central inference server when `config` asks for it."""
    if config.inference != "central":
        return LocalActors(specs, buffers, params, ctx)
    assert config.envs_per_actor and config.num_actors
    spec = specs[0].obs_spec
    channels = InferenceChannels(
        spec, config.num_actors, config.envs_per_actor, CORE_SIZE if config.use_lstm else 0, ctx
    )
    stop = ctx.Event()
    # why: the server gets its own copy of the agent (on the learner's device) and loads
    # published weights into it between batches; the learner's module changes in place
    # during an update and must never be read mid-step.
    server = InferenceServer(
        channels,
        copy.deepcopy(agent),
        params,
        device,
        stop,
        max_batch=config.inference_max_batch,
        max_wait_s=config.inference_max_wait_ms / 1000.0,
    )
    return LocalActors(
        specs, buffers, params, ctx, channels=channels, server=server, stop_event=stop
    )
