"""Builds every object of an IMPALA run from a config: the env probe, agent, optimiser,
learner with the V-trace loss, and the backend's transport and actors. `loop.train` then
only runs the loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from gazelle.algorithms.common import env_kwargs, learner_threads, prepare
from gazelle.algorithms.impala.learning import MakeLoss, make_learner, step_targets_of, vtrace_loss
from gazelle.algorithms.impala.passes import StepTargets, anchors_at_learner
from gazelle.algorithms.impala.settings import ImpalaConfig
from gazelle.algorithms.layout import lockstep_acts
from gazelle.backends import BackendRequest, Learners, Transport, build_backend
from gazelle.config import Config, ConfigError
from gazelle.models import build_agent
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.learner import Learner, LossFn

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe


@dataclasses.dataclass
class ImpalaRun:
    """A built, not yet started, IMPALA run."""

    config: Config
    probe: EnvProbe
    device: torch.device
    agent: torch.nn.Module
    optimizer: torch.optim.Optimizer
    learner: Learner
    transport: Transport
    learners: Learners | None = None  # `--learners N` > 1: ranks 1..N-1, and rank 0's group

    @property
    def levels(self) -> list[str]:
        return self.probe.levels

    @property
    def obs_spec(self) -> Any:
        return self.probe.obs_spec

    @property
    def action_repeats(self) -> int:
        return self.probe.action_repeats

    # The resolved numbers every loop needs (never None after `resolve`).
    @property
    def batch_size(self) -> int:
        return int(self.config.algorithm.batch_size or 0)

    @property
    def unroll_length(self) -> int:
        return int(self.config.algorithm.unroll_length or 0)

    @property
    def total_frames(self) -> int:
        return int(self.config.run.total_frames or 0)

    @property
    def learning_rate(self) -> float:
        return float(self.config.algorithm.learning_rate or 0.0)

    @property
    def anchor_at_learner(self) -> bool:
        """APPO's `--clip-anchor learner` or `--targets batch`: the batch gets the learner's
        policy and values before its passes (`passes.train_on_batch`)."""
        return anchors_at_learner(self.config.algorithm)

    @property
    def step_targets(self) -> StepTargets | None:
        """The targets of a batch's steps for minibatches of steps (`step_targets_of`)."""
        return step_targets_of(self.config)

    @property
    def passes(self) -> tuple[int, int]:
        """`(epochs, minibatches)`: optimiser steps per batch (APPO; IMPALA: one step)."""
        section = self.config.algorithm
        return int(getattr(section, "epochs", None) or 1), int(
            getattr(section, "minibatches", None) or 1
        )


def learner_rate(config: Config, found: EnvProbe, device: torch.device) -> Callable[[float], float]:
    """The layout's learner cost (`gazelle.algorithms.layout`): a measurement `seconds ->
    agent steps learned per core-second` on a fresh agent and learner of a resolved config
    (`gazelle.runtime.part_costs.learner_rate`), each step counted once per pass over it
    (APPO's `epochs`). Call it inside `torch.random.fork_rng` to leave the run's RNG as it
    was: the agent's initial weights draw from it."""
    from gazelle.runtime import part_costs

    model = config.model
    assert model.init is not None  # resolved from the preset
    agent = build_agent(
        found.obs_spec, model.torso, bool(model.use_lstm), model.init, **model.agent_options()
    ).to(device)
    learner = make_learner(config, agent, device)
    section = config.algorithm
    shape = int(section.unroll_length or 1), int(section.batch_size or 1)
    # why: APPO trains on each sample `epochs` times (its minibatches split the same work).
    epochs = int(getattr(section, "epochs", None) or 1)
    return lambda seconds: (
        part_costs.learner_rate(learner, found.obs_spec, *shape, seconds) / epochs
    )


def value_levels(config: Config, levels: int) -> int:
    """The agent's value outputs: one per level with `--popart` (the PopArt paper's multi-task
    agent: each level's returns keep their own mu and sigma), else one."""
    return levels if config.algorithm.popart else 1


def actor_specs(config: Config, found: EnvProbe) -> list[ActorSpec]:
    """One spec per actor, levels dealt round-robin as in the seed."""
    actors, impala = config.actors, config.algorithm
    assert actors.num_actors and actors.envs_per_actor and impala.unroll_length
    levels = found.levels
    # why: with one actor, only the timing of its weight pulls differs between two runs of
    # one seed; acting in lockstep with the learner removes it (docs/usage.md,
    # Reproducibility). A dropped stale unroll would leave the learner short of updates.
    lockstep = lockstep_acts(config, len(levels))
    return [
        ActorSpec(
            actor_id=i,
            level=levels[i % len(levels)],
            level_id=i % len(levels),
            envs_per_actor=actors.envs_per_actor,
            unroll_length=impala.unroll_length,
            obs_spec=found.obs_spec,
            torso=config.model.torso,
            use_lstm=bool(config.model.use_lstm),
            seed=config.run.seed * 1_000_003 + 1000 * i,
            env_kwargs=env_kwargs(config),
            lockstep_batch=impala.batch_size if lockstep else None,
            num_levels=value_levels(config, len(levels)),
            agent_options=config.model.agent_options(),
            action_bounds=config.model.action_bounds,
            env_target=found.target(levels[i % len(levels)]),
            env_groups=actors.env_groups or 1,
        )
        for i in range(actors.num_actors)
    ]


#: Starts ranks 1..N-1 of `--learners N` for a resolved config, its env probe and rank 0's
#: device, and joins them (`impala.ranks.start`).
StartLearners = Callable[[Config, "EnvProbe", torch.device], Learners]


def build(
    config: Config,
    loss_fn: LossFn | None = None,
    make_loss: MakeLoss = vtrace_loss,
    start_learners: StartLearners | None = None,
) -> ImpalaRun:
    """Everything an IMPALA (or APPO) run needs; actors are built but not started.

    `loss_fn` replaces the V-trace loss (the algorithm seam: any `(agent, batch) -> (loss,
    metrics)` trains through the same actors, batches, optimiser, logs and checkpoints);
    `make_loss` makes it from the resolved config (APPO's clipped surrogate);
    `start_learners` starts the other learners of `--learners N` > 1."""
    if not isinstance(config.algorithm, ImpalaConfig):  # why: APPO's section is one too
        raise ConfigError("algo", config.algo, "impala | appo (this is IMPALA's builder)")
    config, found, device = prepare(config)
    assert config.algorithm.batch_size and config.actors.envs_per_actor
    assert config.run.total_frames
    keep_freed_memory()  # why: the learner reallocates its big activations every step
    learner_threads(config, device)
    agent = new_agent(config, found.obs_spec, value_levels(config, len(found.levels)), device)
    if config.run.learners > 1 and start_learners is None:
        raise ConfigError(
            "learners", config.run.learners, "1 here (this caller starts no other learners)"
        )
    # why: the transport first: on Ray it joins (or starts) the cluster and owns that
    # connection (its fleet's `close`, the last to run, ends it), and the learners need it.
    transport = _transport(config, found, agent, device)
    learners = None
    try:
        if start_learners is not None and config.run.learners > 1:
            learners = start_learners(config, found, device)
        collective = learners.collective if learners is not None else None
        learner = make_learner(config, agent, device, loss_fn, make_loss, collective)
    except BaseException:
        if learners is not None:
            learners.close(timeout=1.0)
        transport.fleet.close()
        raise
    return ImpalaRun(config, found, device, agent, learner.optimizer, learner, transport, learners)


def new_agent(config: Config, obs_spec: Any, levels: int, device: torch.device) -> Any:
    """A fresh agent of a resolved config (the learner's; each learner rank's)."""
    model = config.model
    assert model.use_lstm is not None and model.init is not None  # resolved from the preset
    return build_agent(
        obs_spec, model.torso, model.use_lstm, model.init, num_levels=levels,
        **model.agent_options(),
    ).to(device)  # fmt: skip


def _transport(config: Config, found: EnvProbe, agent: Any, device: torch.device) -> Transport:
    """The backend's actors, buffers and weights for a resolved config."""
    assert config.algorithm.batch_size and config.actors.envs_per_actor
    slots_per_env = config.actors.slots_per_env
    assert slots_per_env is not None  # resolved with the layout (`default_slots_per_env`)
    request = BackendRequest(
        actors=actor_specs(config, found),
        slots_per_actor=config.actors.envs_per_actor * slots_per_env,
        batch_size=config.algorithm.batch_size,
        agent=agent,
        device=device,
        inference=config.actors.inference,
        inference_max_batch=config.actors.inference_max_batch,
        inference_max_wait_s=config.actors.inference_max_wait_ms / 1000.0,
        actor_timeout_s=config.actors.actor_timeout_s,
        cluster_address=config.actors.ray_address,
        cpus_per_actor=config.actors.ray_actor_cpus,
        dashboard=config.actors.ray_dashboard,
        allow_tokenless=config.actors.ray_allow_tokenless,
    )
    return build_backend(config.actors.backend, request)
