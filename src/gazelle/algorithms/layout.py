"""The actors' layout when `--num-actors` is left unset: chosen from the machine and the run.

On a CPU learner, IMPALA's cores are shared between acting (env steps and the actors' own
inference) and learning, so the right number of actor processes depends on what one agent
step costs in each. `choose_num_actors` measures that at start-up, in core-seconds per
agent step (each part's best of three interleaved rounds, about 3 s in all; one round, about
1 s, where its costs already decide the count: `SETTLED_MARGIN`): the env and
an agent copy's inference here, the learner through the cost the algorithm hands it
(`Algorithm.learner_rate` in `gazelle.config.registry`: its own fresh learner; this module
builds none), and gives the actors their share of the cores, rounded up:

    actors = ceil(cores * acting / (acting + learning) - SLACK)

On 2 cores this picks 2 actors for the shallow torso (acting ~60% of the work) and 1 for
nature and deep (the learner costs more than acting): the best rows of the scaling table in
docs/performance.md. Where the learner runs on a GPU (and the actors only step envs), every
core but the learner's driver goes to actors; for an algorithm without a learner cost (A3C:
each worker learns for itself) and on a backend whose actors run elsewhere
(`Backend.on_this_machine`: Ray, the cluster's cores are not this machine's) the rule is
`default_num_actors`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from gazelle.config import Config, default_num_actors, registry

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
#: The rounds stop after the first where the choice would not change with acting's or the
#: learner's cost divided by this (`settled`): a later round can only lower a cost, and a
#: round slowed by a burst of interference was measured at half speed (the learner's round
#: of 1,500 steps/s among 2,900 and 3,000 in tests/test_layout.py). CartPole (acting ~77%
#: of the work) and the deep torso on 2 cores (~26%) are settled after one round of the
#: three, about 1.5 s sooner; the shallow (~61%) and nature (~48%) torsos, near the rule's
#: threshold of 52.5% on 2 cores, are measured in full.
SETTLED_MARGIN = 2.0


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


#: The algorithm's learner cost: `(config, probe, device) -> (seconds -> agent steps learned
#: per core-second)` (`Algorithm.learner_rate`).
LearnerRate = Callable[[Config, "EnvProbe", torch.device], Callable[[float], float]]


def settled(costs: StepCosts, cores: int, num_levels: int = 1) -> bool:
    """Whether `actors_for` gives the same count with acting's cost, or the learner's,
    divided by `SETTLED_MARGIN` (see there)."""
    n = actors_for(costs, cores, num_levels)
    acting_less = dataclasses.replace(
        costs,
        env_s=costs.env_s / SETTLED_MARGIN,
        inference_s=costs.inference_s / SETTLED_MARGIN,
    )
    learner_less = dataclasses.replace(costs, learner_s=costs.learner_s / SETTLED_MARGIN)
    return all(actors_for(c, cores, num_levels) == n for c in (acting_less, learner_less))


def _costs(rates: dict[str, float]) -> StepCosts:
    return StepCosts(1.0 / rates["env"], 1.0 / rates["inference"], 1.0 / rates["learner"])


def measure_costs(
    config: Config,
    found: EnvProbe,
    device: torch.device,
    learner: LearnerRate | None = None,
    enough: Callable[[StepCosts], bool] | None = None,
) -> StepCosts:
    """Each part alone, one thread: env steps and an agent copy's inference here, the
    learner by `learner` (the algorithm's `Algorithm.learner_rate` unless given), each on
    fresh objects (the run's own weights, optimiser state and RNG streams are not touched);
    fewer rounds where `enough(costs so far)` says so (`best_rates`)."""
    from gazelle.runtime import part_costs
    from gazelle.runtime.allocator import keep_freed_memory

    learner = learner or registry.algorithm(config.algo).learner_rate
    assert learner is not None, f"--algo {config.algo} declares no learner cost"
    keep_freed_memory()  # why: as the run's learner will; without it deep measures ~1.6x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            learner_measure = learner(config, found, device)
            envs = int(config.actors.envs_per_actor or 1)
            # why: the probe makes the env as it made it, without resolving the spec again.
            make_env = functools.partial(found.make, found.levels[0], seed=0)
            rates = part_costs.best_rates(
                {
                    "env": lambda s: part_costs.env_rate(make_env, s),
                    "inference": lambda s: part_costs.inference_rate(
                        config, found.obs_spec, envs, s
                    ),
                    "learner": learner_measure,
                },
                MEASURE_S,
                ROUNDS,
                None if enough is None else lambda rates: enough(_costs(rates)),
            )
    finally:
        torch.set_num_threads(threads)
    return _costs(rates)


def lockstep_blocked(config: Config, levels: int) -> str | None:
    """Why `--lockstep` cannot act in this run, or None (it acts, or was not asked for). It
    acts with one actor of local inference on this machine, for an algorithm with learner
    batches and no `--max-policy-lag` (`impala.build.actor_specs`); an unset `--num-actors`
    counts as the one it needs (`choose_num_actors`)."""
    actors, algorithm = config.actors, config.algorithm
    if not actors.lockstep:
        return None
    if not registry.backend(actors.backend).on_this_machine:
        return f"--backend {actors.backend} runs the actors elsewhere"
    if actors.inference != "local":
        return f"--inference {actors.inference} (it needs the actor's own copy: local)"
    if not getattr(algorithm, "batch_size", None):
        return f"--algo {config.algo} has no learner batches to keep step with"
    if getattr(algorithm, "max_policy_lag", None) is not None:
        return "--max-policy-lag drops unrolls, and the actor would wait for updates never made"
    if levels > 1:
        return f"{levels} levels take an actor each, and it acts with one"
    if actors.num_actors not in (None, 1):
        return f"--num-actors {actors.num_actors} (it acts with one)"
    return None


def lockstep_acts(config: Config, levels: int) -> bool:
    """`--lockstep` asked for (or set by the preset) and able to act (`lockstep_blocked`)."""
    return bool(config.actors.lockstep) and lockstep_blocked(config, levels) is None


def choose_num_actors(
    config: Config, found: EnvProbe, device: torch.device, cores: int | None = None
) -> tuple[int, str]:
    """`--num-actors` for a resolved config that left it unset, and a log line saying why."""
    cores = cores or os.cpu_count() or 1
    levels = len(found.levels)
    learner = registry.algorithm(config.algo).learner_rate
    here = registry.backend(config.actors.backend).on_this_machine
    if lockstep_acts(config, levels):
        # why: --lockstep acts with one actor only; measuring a count it would then ignore
        # left a lockstep run free-running on 2 actors (and its policy lagging).
        return 1, "gazelle: layout: 1 actor (--lockstep: one actor acts in step with the learner)"
    if learner is None or not here or device.type != "cpu":
        n = default_num_actors(levels, cores)
        why = "every core but the learner's" if learner else "cores - 1, at least 2"
        return n, f"gazelle: layout: {n} actor{'s' if n > 1 else ''} ({why}, {cores} cores)"
    costs = measure_costs(
        config, found, device, learner, lambda costs: settled(costs, cores, levels)
    )
    n = actors_for(costs, cores, levels)
    return n, (
        f"gazelle: layout: {n} actor{'s' if n > 1 else ''} x {config.actors.envs_per_actor} envs "
        f"on {cores} cores: "
        f"one agent step costs env {costs.env_s * 1e3:.3f} + inference "
        f"{costs.inference_s * 1e3:.3f} + learner {costs.learner_s * 1e3:.3f} ms of a core, "
        f"acting {costs.acting_share:.0%} of the work (--num-actors to choose)"
    )
