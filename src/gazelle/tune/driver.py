"""`gazelle tune`'s driver: the Ray cluster (private by default), Ray Tune's
`PopulationBasedTraining` over the members, then gazelle's summary.

    gazelle tune (driver) ─► Ray (a private instance here, or --ray-address's cluster)
        Tuner(train_member x population, PBT scheduler) ─► one Tune trial per member,
        each a gazelle run on the local backend (its learner in the trial's Ray worker,
        its actors as that worker's processes)
    ─► OUT/ray/ (Ray Tune's own experiment: trials' results, checkpoints, pbt_*.txt)
    ─► OUT/summary.json, summary.md, curves.png (`gazelle.tune.summary`)

The cluster is joined or started by the code and checks of `gazelle train --backend ray`
(`gazelle.backends.ray.cluster.connect`): loopback, token, a 0700 session folder, the
listening sockets read back after start-up and once the members run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import warnings
from typing import Any

from gazelle.config import ConfigError
from gazelle.errors import RunError
from gazelle.tune import resume
from gazelle.tune.explore import (
    START_KEY,
    Bounds,
    hyperparam_mutations,
    member_name,
    search_space,
)
from gazelle.tune.member import METRIC, TIME_ATTR, train_member
from gazelle.tune.spec import TuneSpec

#: The Ray Tune versions gazelle runs on (pyproject's `tune` extra).
INSTALL = "pip install -e '.[tune]' (or pip install 'ray[tune]>=2.59,<3')"
#: Tune checkpoints kept per member: PBT copies a member's latest, and warns below 3.
KEEP = 4


def require_tune() -> Any:
    """`ray.tune`, or a one-line error naming the pip command."""
    from gazelle.backends.ray import cluster

    try:
        cluster.require_ray()
    except ConfigError:
        raise RunError(f"gazelle tune needs Ray Tune: {INSTALL}") from None
    if any(importlib.util.find_spec(name) is None for name in ("pandas", "pyarrow")):
        raise RunError(f"gazelle tune needs Ray Tune, which is not installed: {INSTALL}")
    try:
        from ray import tune
    except ImportError as err:
        raise RunError(f"gazelle tune needs Ray Tune ({err}): {INSTALL}") from None
    return tune


def check_room(nodes: list[dict[str, Any]], cpus: float, gpus: float) -> int:
    """How many members the alive `nodes` (`ray.nodes()`) hold at once; a ConfigError when
    no node could ever hold one (Tune would leave it pending forever)."""
    fits = 0
    for node in nodes:
        have = dict(node.get("Resources") or {}) if node.get("Alive") else {}
        if not have:
            continue
        by_cpu = int(float(have.get("CPU", 0.0)) // cpus + 1e-9) if cpus > 0 else 10**6
        by_gpu = int(float(have.get("GPU", 0.0)) // gpus + 1e-9) if gpus > 0 else 10**6
        fits += min(by_cpu, by_gpu)
    if fits == 0:
        raise ConfigError(
            "member_cpus",
            cpus,
            "what one Ray node has (lower --member-cpus / --member-gpus, or --num-actors)",
            problem=f"no node has {cpus:g} CPUs and {gpus:g} GPUs for one member",
        )
    return fits


def sized(spec: TuneSpec, nodes: list[dict[str, Any]]) -> TuneSpec:
    """`spec` with each member's size settled for the cluster (`ray.nodes()`): CPUs
    `--member-cpus`, else `--num-actors` + 1 (its actors and its learner), else the largest
    node's CPUs shared by the population (and `--num-actors` one less); GPUs
    `--member-gpus`, else the cluster's GPUs shared by the population (at most 1 each) when
    it has any and `--device` is not cpu. A member given no GPU trains on the CPU."""
    alive = [dict(node.get("Resources") or {}) for node in nodes if node.get("Alive")]
    most_cpus = max((float(r.get("CPU", 0.0)) for r in alive), default=1.0)
    gpus_in_all = sum(float(r.get("GPU", 0.0)) for r in alive)
    base, actors = spec.base, spec.base.actors.num_actors
    cpus = spec.member_cpus
    if cpus is None:
        cpus = float(actors + 1) if actors else max(2.0, float(int(most_cpus) // spec.population))
    if actors is None:
        base = base.replace(num_actors=max(1, int(cpus) - 1))
    gpus = spec.member_gpus
    if gpus is None:
        on_cpu = base.run.device == "cpu"
        gpus = 0.0 if on_cpu or gpus_in_all == 0 else min(1.0, gpus_in_all / spec.population)
    if gpus == 0 and base.run.device == "auto":
        base = base.replace(device="cpu")  # why: a GPU that Ray gave no member is not its own
    return dataclasses.replace(spec, base=base, member_cpus=cpus, member_gpus=gpus)


def _trial_name(trial: Any) -> str:
    return member_name(int(trial.config[START_KEY]))


def run_tune(spec: TuneSpec) -> dict[str, Any]:
    """Run the population to its budget and write its summary; returns the summary."""
    tune = require_tune()
    import ray
    from ray.tune.schedulers import PopulationBasedTraining

    from gazelle.backends.ray import cluster
    from gazelle.tune.summary import write_summary

    spec.out.mkdir(parents=True, exist_ok=True)
    experiment = spec.out / "ray"
    # why: before the cluster starts, and of the spec as given (sizing reads the cluster)
    resuming = resume.prepare(spec, tune.Tuner.can_restore(str(experiment)))
    owns = cluster.connect(spec.ray_address, spec.ray_dashboard, spec.ray_allow_tokenless)
    try:
        spec = sized(spec, ray.nodes())
        assert spec.member_cpus is not None and spec.member_gpus is not None
        at_once = check_room(ray.nodes(), spec.member_cpus, spec.member_gpus)
        print(
            f"gazelle tune: {spec.population} members of {spec.member_cpus:g} CPUs and "
            f"{spec.member_gpus:g} GPUs each ({spec.base.actors.num_actors} actors), "
            f"{min(at_once, spec.population)} at once; "
            f"exploring {', '.join(m.describe() for m in spec.mutations)} every "
            f"{spec.interval:,} frames, {spec.frames:,} frames each",
            flush=True,
        )
        # why: PBT draws its quantile choices and perturbations from Python's `random`
        random.seed(spec.tune_seed)
        trainable = tune.with_resources(
            tune.with_parameters(train_member, spec=spec),
            {"cpu": spec.member_cpus, "gpu": spec.member_gpus},
        )
        if resuming:
            print(f"gazelle tune: continuing the population in {spec.out}", flush=True)
            # why: Tune's saved state (its PBT scheduler, trials' configs and checkpoints)
            # rules, so no scheduler is built here; `prepare` checked that this spec is the
            # one it was started with
            tuner = tune.Tuner.restore(
                str(experiment), trainable, resume_unfinished=True, resume_errored=True
            )
        else:
            scheduler = PopulationBasedTraining(
                time_attr=TIME_ATTR,
                perturbation_interval=spec.interval,
                hyperparam_mutations=hyperparam_mutations(spec.mutations),
                quantile_fraction=spec.quantile,
                resample_probability=spec.resample_probability,
                custom_explore_fn=Bounds(spec.mutations),
                synch=spec.synch,
            )
            tuner = tune.Tuner(
                trainable,
                param_space=search_space(spec),
                tune_config=tune.TuneConfig(
                    metric=METRIC,
                    mode="max",
                    scheduler=scheduler,
                    trial_name_creator=_trial_name,
                    trial_dirname_creator=_trial_name,
                ),
                run_config=tune.RunConfig(
                    name="ray",
                    storage_path=str(spec.out),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP),
                    # why: the experiment's state (each member's last checkpoint) reaches
                    # OUT/ray at once, not 5 minutes later: a population stopped then
                    # continues from its members' last reports (measured: without it,
                    # Ctrl-C left the state of the first report)
                    sync_config=tune.SyncConfig(sync_period=0),
                    failure_config=tune.FailureConfig(max_failures=0),
                    # why: a member's last report ends its trial here, not in PBT (whose
                    # synchronous mode would pause it once more, to wait for the others)
                    stop={TIME_ATTR: spec.frames},
                    callbacks=[_socket_check()],
                    verbose=1,
                ),
            )
        with warnings.catch_warnings():
            # why: Tune's hint to reuse actors: measured slower here (a paused member's
            # restart waited for the other member's cached actor), so each start of a
            # member's trial gets a fresh Ray worker
            warnings.filterwarnings("ignore", message=".*reuse_actors.*")
            tuner.fit()
    finally:
        if owns:
            cluster.disconnect()
    return write_summary(spec)


def _socket_check() -> Any:
    """A Tune callback (its class made once Ray Tune is imported)."""
    from ray import tune

    class SocketCheck(tune.Callback):
        """Once the first member reported (its Ray worker listens by then): a private
        instance's listening sockets read back again (`cluster.after_start`)."""

        checked = False

        def on_trial_result(self, *args: Any, **kwargs: Any) -> None:
            if not self.checked:
                from gazelle.backends.ray import cluster

                self.checked = True
                cluster.after_start()

    return SocketCheck()
