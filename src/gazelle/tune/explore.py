"""PBT's explore step in gazelle's terms: the search space Ray Tune starts each member
from, the mutations its `PopulationBasedTraining` scheduler perturbs (bounded here), and a
member's values turned into a typed gazelle `Config`.

    search_space(spec)       {"start_member": grid over members, FIELD: that member's start}
    hyperparam_mutations()   {FIELD: a Ray Tune domain, or a list}: PBT's resample / x0.8, x1.2
    Bounds(mutations)        PBT's custom_explore_fn: every value back within its bounds
    member_config(...)       the base Config with the member's values, logdir, seed, budget
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gazelle.config import Config
from gazelle.tune.spec import Mutation, TuneSpec

#: The trial config key that names the member whose starting values a config descends
#: from (an exploit copies the better member's config, this key included).
START_KEY = "start_member"


def member_name(index: int) -> str:
    return f"member-{index}"


def member_index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def search_space(spec: TuneSpec) -> dict[str, Any]:
    """Ray Tune's `param_space`: one trial per member, each with its starting values."""
    from ray import tune

    starts = [dict(values) for values in spec.starts]

    def start_of(name: str) -> Any:
        # why: resolved per trial after the grid, so each trial reads its own member's row
        return tune.sample_from(lambda config: starts[config[START_KEY]][name])

    space: dict[str, Any] = {START_KEY: tune.grid_search(list(range(len(starts))))}
    space.update({m.name: start_of(m.name) for m in spec.mutations})
    return space


def hyperparam_mutations(mutations: Sequence[Mutation]) -> dict[str, Any]:
    """PBT's `hyperparam_mutations`: a list for a list (it moves to a neighbour), a Ray Tune
    domain for a range (resampled from it, or scaled by one of PBT's factors)."""
    from ray import tune

    out: dict[str, Any] = {}
    for m in mutations:
        if m.choices:
            out[m.name] = list(m.choices)
            continue
        assert m.low is not None and m.high is not None
        if m.kind == "int":
            low, high = int(m.low), int(m.high) + 1  # why: Ray's upper bound is exclusive
            out[m.name] = tune.lograndint(low, high) if m.log else tune.randint(low, high)
        else:
            out[m.name] = tune.loguniform(m.low, m.high) if m.log else tune.uniform(m.low, m.high)
    return out


class Bounds:
    """PBT's `custom_explore_fn`: Ray's explore scales a value by 0.8 or 1.2 without
    looking at its bounds; this puts every explored value back within them, as its
    field's type."""

    def __init__(self, mutations: Sequence[Mutation]) -> None:
        self.mutations = tuple(mutations)

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        return {**config, **values_of(config, self.mutations)}


def values_of(config: Mapping[str, Any], mutations: Sequence[Mutation]) -> dict[str, Any]:
    """The explored fields' values of a trial's config, within bounds and as plain Python
    numbers (a Ray domain samples numpy's)."""
    return {m.name: m.clip(config[m.name]) for m in mutations}


def member_config(spec: TuneSpec, index: int, values: Mapping[str, Any], logdir: Path) -> Config:
    """Member `index`'s gazelle config: the base, its explored values, its own logdir and
    seed, and the member's whole budget (so that its learning-rate decay spans all of it
    and a segment's resume continues it exactly)."""
    return spec.base.replace(
        logdir=str(logdir),
        total_frames=spec.frames,
        seed=spec.base.run.seed + index,
        resume=True,
        **dict(values),
    )
