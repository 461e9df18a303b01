"""The actors' layout when `--num-actors` is left unset: chosen from the machine and the run.

On a CPU learner, IMPALA's cores are shared between acting (env steps and the actors' own
inference) and learning, so the right number of actor processes depends on what one agent
step costs in each. `choose_num_actors` measures that at start-up, in core-seconds per
agent step and on a throwaway copy of the run's agent and learner (each part's best of
three interleaved rounds, about 3 s in all), and gives the actors their share of the cores,
rounded up:

    actors = ceil(cores * acting / (acting + learning) - SLACK)

On 2 cores this picks 2 actors for the shallow torso (acting ~60% of the work) and 1 for
nature and deep (the learner costs more than acting): the best rows of the scaling table in
docs/performance.md. Where the learner runs on a GPU (and the actors only step envs), every
core but the learner's driver goes to actors; with A3C (each worker learns for itself) and
on Ray (the cluster's cores are not this machine's) the rule is `default_num_actors`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

from gazelle.config import Config, default_num_actors

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe

#: Acting's share of the cores is rounded up only past this fraction of a core: an actor
#: that would be idle most of the time still costs a process, its memory and a share of the
#: learner's core. Small, so that the choice sits far from the measured shares: on 2 cores
#: the threshold is a share of 0.525, between nature's 0.43-0.49 (1 actor best) and
#: shallow's and CartPole's 0.60-0.63 (2 actors best). Breakout, 6 start-ups in a row: shallow
#: 0.614-0.623 and nature 0.480-0.488 with the best of 3 rounds, against 0.607-0.631 and
#: 0.473-0.495 from one round of 0.4 s.
SLACK = 0.05

#: Seconds each part is measured for at start-up, over `ROUNDS` interleaved rounds whose
#: best is kept (`best_rates`).
MEASURE_S = 0.75
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class StepCosts:
    """Core-seconds one agent step costs in each part of an IMPALA run."""

    env_s: float
    inference_s: float
    learner_s: float

    @property
    def acting_share(self) -> float:
        """The fraction of the machine's work that is acting (env + inference)."""
        acting = self.env_s + self.inference_s
        return acting / (acting + self.learner_s)


def actors_for(costs: StepCosts, cores: int, num_levels: int = 1) -> int:
    """Actor processes for a CPU learner: acting's share of `cores`, rounded up past
    `SLACK`, at least 1 and one per level, at most one per core."""
    wanted = math.ceil(cores * costs.acting_share - SLACK)
    return max(1, min(cores, wanted), num_levels)


def measure_costs(config: Config, found: EnvProbe, device: torch.device) -> StepCosts:
    """Each part alone, one thread, on fresh copies of the run's agent and learner (the
    run's own weights, optimiser state and RNG streams are not touched)."""
    from gazelle.algorithms.common import env_kwargs
    from gazelle.algorithms.impala.build import make_learner
    from gazelle.models import build_agent
    from gazelle.runtime.allocator import keep_freed_memory
    from gazelle.runtime.part_costs import best_rates, env_rate, inference_rate, learner_rate

    keep_freed_memory()  # why: as the run's learner will; without it deep measures ~1.6x slower
    model = config.model
    assert model.init is not None  # resolved from the preset
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            agent = build_agent(
                found.obs_spec, model.torso, bool(model.use_lstm), model.init,
                **model.agent_options(),
            )  # fmt: skip
            agent = agent.to(device)
            run = SimpleNamespace(
                config=config,
                obs_spec=found.obs_spec,
                agent=agent,
                device=device,
                learner=make_learner(config, agent, device),
                unroll_length=int(config.algorithm.unroll_length or 1),
                batch_size=int(config.algorithm.batch_size or 1),
            )
            envs, kwargs = int(config.actors.envs_per_actor or 1), env_kwargs(config)
            rates = best_rates(
                {
                    "env": lambda s: env_rate(found.levels[0], kwargs, s),
                    "inference": lambda s: inference_rate(run, envs, s),
                    "learner": lambda s: learner_rate(run, s),
                },
                MEASURE_S,
                ROUNDS,
            )
    finally:
        torch.set_num_threads(threads)
    # why: APPO trains on each sample `epochs` times (its minibatches split the same work).
    epochs = int(getattr(config.algorithm, "epochs", None) or 1)
    return StepCosts(1.0 / rates["env"], 1.0 / rates["inference"], epochs / rates["learner"])


def choose_num_actors(
    config: Config, found: EnvProbe, device: torch.device, cores: int | None = None
) -> tuple[int, str]:
    """`--num-actors` for a resolved config that left it unset, and a log line saying why."""
    cores = cores or os.cpu_count() or 1
    levels = len(found.levels)
    learns = config.algo in ("impala", "appo")
    measured = learns and config.actors.backend == "local" and device.type == "cpu"
    if not measured:
        n = default_num_actors(levels, cores)
        why = "every core but the learner's" if learns else "cores - 1, at least 2"
        return n, f"gazelle: layout: {n} actor{'s' if n > 1 else ''} ({why}, {cores} cores)"
    costs = measure_costs(config, found, device)
    n = actors_for(costs, cores, levels)
    return n, (
        f"gazelle: layout: {n} actor{'s' if n > 1 else ''} x {config.actors.envs_per_actor} envs "
        f"on {cores} cores: "
        f"one agent step costs env {costs.env_s * 1e3:.3f} + inference "
        f"{costs.inference_s * 1e3:.3f} + learner {costs.learner_s * 1e3:.3f} ms of a core, "
        f"acting {costs.acting_share:.0%} of the work (--num-actors to choose)"
    )
