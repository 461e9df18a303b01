"""What a population is: its size, budget, interval, the hyperparameters it explores and
their bounds, read from `gazelle tune`'s flags (or built in Python).

    Mutation.parse("learning_rate=1e-4:1e-2", "impala")   # a range (log scale: LOW > 0)
    Mutation.parse("unroll_length=20,40,80", "impala")    # a list (PBT steps to a neighbour)

A mutated field must be a setting of the algorithm's own section (its learning
hyperparameters, `gazelle train --help`), one whose change a resume can take: the network's
shape and the run's placement are the same for every member, so a member can continue from
any other member's checkpoint.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gazelle.config import Config, ConfigError, algorithm_fields, finite

#: Fields of an algorithm's section that a member cannot change on resume, and why.
NOT_MUTABLE = {
    "preset": "it picks the other settings, once, at the start",
    "optimizer": "the checkpoint's optimiser state is another optimiser's",
    "popart": "it adds state to the value head",
    "learning_rate_decay": "it is the shape of the learning-rate schedule",
}
#: Explored unless named: these fields, from the preset's value / SPREAD to x SPREAD.
DEFAULT_MUTATIONS = ("learning_rate", "entropy_cost")
SPREAD = 10.0
FORM = "FIELD=LOW:HIGH (a range) or FIELD=A,B,... (a list)"


def mutable_fields(algo: str) -> dict[str, str]:
    """Field name -> its type (`int`, `float`, `str`, `bool`) for the fields of `algo`'s
    section that a population may explore."""
    out = {}
    for name, flat in algorithm_fields(algo).items():
        if name not in NOT_MUTABLE:
            out[name] = flat.type.split(" |")[0]
    return out


def _value(text: str, kind: str, what: str) -> Any:
    """`text` as a value of a field of type `kind`; ValueError naming `what` otherwise."""
    if kind in ("int", "float"):
        return finite.number(text, int if kind == "int" else float)
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"invalid value {text!r} in {what}; allowed: true or false")
        return text.lower() == "true"
    if not text.strip():
        raise ValueError(f"an empty value in {what}")
    return text


@dataclass(frozen=True)
class Mutation:
    """One explored field: a range `[low, high]` (log-uniform when `low > 0`) or a list of
    `choices` (PBT moves to a neighbour, or resamples)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()

    @property
    def log(self) -> bool:
        return self.low is not None and self.low > 0

    @classmethod
    def parse(cls, text: str, algo: str) -> Mutation:
        """`FIELD=LOW:HIGH` or `FIELD=A,B,...`; a ConfigError (flag `--mutate`) naming the
        bad value and what is allowed."""
        name, sep, spec = text.partition("=")
        name = name.strip().replace("-", "_")
        fields = mutable_fields(algo)
        if not sep or not spec.strip():
            raise ConfigError("mutate", text, FORM)
        if name not in fields:
            why = NOT_MUTABLE.get(name)
            problem = (
                f"{name} cannot change between members ({why})"
                if why
                else f"{name!r} is not a setting of --algo {algo}"
            )
            allowed = f"{FORM}, FIELD one of: {', '.join(fields)}"
            raise ConfigError("mutate", text, allowed, problem=f"invalid value {text!r}: {problem}")
        kind = fields[name]
        try:
            if ":" in spec:
                if kind not in ("int", "float"):
                    raise ValueError(f"{name} is a {kind}: give a list A,B,...")
                low_text, _, high_text = spec.partition(":")
                low, high = _value(low_text, kind, text), _value(high_text, kind, text)
                if not low < high:
                    raise ValueError(f"LOW {low} is not below HIGH {high}")
                return cls(name, kind, float(low), float(high))
            choices = tuple(_value(part.strip(), kind, text) for part in spec.split(","))
            if len(set(choices)) != len(choices) or len(choices) < 2:
                raise ValueError("a list needs two or more different values")
            return cls(name, kind, choices=choices)
        except ValueError as err:
            raise ConfigError(
                "mutate", text, FORM, problem=f"invalid value {text!r} ({err})"
            ) from None

    @classmethod
    def around(cls, name: str, kind: str, value: float) -> Mutation:
        """The default range of a field: `value / SPREAD` to `value * SPREAD`."""
        return cls(name, kind, value / SPREAD, value * SPREAD)

    def contains(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        assert self.low is not None and self.high is not None
        return isinstance(value, int | float) and self.low <= value <= self.high

    def clip(self, value: Any) -> Any:
        """`value` within the bounds, as the field's type (PBT's `* 1.2` leaves a range)."""
        if self.choices:
            return value
        assert self.low is not None and self.high is not None
        clipped = min(max(float(value), self.low), self.high)
        return round(clipped) if self.kind == "int" else clipped

    def sample(self, rng: random.Random) -> Any:
        """A value drawn from the bounds (log-uniform over a positive range)."""
        if self.choices:
            return rng.choice(self.choices)
        assert self.low is not None and self.high is not None
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return self.clip(value)

    def describe(self) -> str:
        if self.choices:
            return f"{self.name} in {{{', '.join(map(str, self.choices))}}}"
        return f"{self.name} in [{self.low:g}, {self.high:g}]{' (log)' if self.log else ''}"


def parse_starts(
    texts: Sequence[str], mutations: Sequence[Mutation], population: int
) -> dict[str, tuple[Any, ...]]:
    """`["FIELD=V1,V2,...", ...]` (one value per member, each within the field's bounds) ->
    {field: values}; a ConfigError (flag `--start`) naming the bad value otherwise."""
    by_name = {m.name: m for m in mutations}
    out: dict[str, tuple[Any, ...]] = {}
    for text in texts:
        name, sep, spec = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in by_name:
            allowed = f"FIELD=V1,...,V{population}, FIELD one of the explored: {', '.join(by_name)}"
            raise ConfigError("start", text, allowed)
        mutation = by_name[name]
        try:
            values = tuple(_value(part.strip(), mutation.kind, text) for part in spec.split(","))
        except ValueError as err:
            raise ConfigError("start", text, f"values of {name}", problem=str(err)) from None
        if len(values) != population or not all(mutation.contains(v) for v in values):
            allowed = f"{population} values (one per member), each {mutation.describe()}"
            raise ConfigError("start", text, allowed)
        out[name] = values
    return out


@dataclass(frozen=True)
class TuneSpec:
    """One population: every member is a gazelle run of `base` with its own values of the
    explored fields, under `out/members/<member>/`."""

    #: the members' common config (their seed is `base`'s + the member's index; logdir and
    #: total_frames are set per member)
    base: Config
    #: the explored fields and their bounds
    mutations: tuple[Mutation, ...]
    #: each member's starting values, {field: value}, one mapping per member
    starts: tuple[Mapping[str, Any], ...]
    #: env frames each member trains for (`--frames`)
    frames: int
    #: frames between two perturbations of a member (`--interval`)
    interval: int
    #: the population's folder: Ray Tune's logs (`ray/`), the members' runs, the summary
    out: Path
    #: what ranks members: "auto" (the capped human-normalised score of a multi-task run
    #: where logged, else the recent mean return) or a progress.jsonl field
    objective: str = "auto"
    #: PBT's synchronous variant: every member waits at each interval for the others
    synch: bool = False
    #: the bottom fraction copies the top fraction
    quantile: float = 0.25
    #: probability that an explored value is drawn afresh instead of scaled by 0.8 or 1.2
    resample_probability: float = 0.25
    #: the seed of PBT's choices and of the starting values drawn
    tune_seed: int = 0
    #: the Ray cluster to join (None: a private Ray instance here)
    ray_address: str | None = None
    ray_allow_tokenless: bool = False
    ray_dashboard: bool = False
    #: CPUs and GPUs each member's Ray Tune trial asks for; None: sized from the cluster
    #: (`gazelle.tune.driver.sized`)
    member_cpus: float | None = None
    member_gpus: float | None = None
    #: the command line, for the summary
    command: str = ""
    #: continue the population already in `out` (`gazelle.tune.resume`); False refuses one
    resume: bool = True

    @property
    def population(self) -> int:
        return len(self.starts)


def starting_values(
    mutations: Sequence[Mutation],
    population: int,
    given: Mapping[str, Sequence[Any]],
    seed: int,
) -> tuple[dict[str, Any], ...]:
    """Each member's starting values: `given` (from `--start`), else drawn within each
    field's bounds (seeded by `seed`)."""
    rng = random.Random(seed)
    drawn = {m.name: [m.sample(rng) for _ in range(population)] for m in mutations}
    return tuple(
        {m.name: (given[m.name][i] if m.name in given else drawn[m.name][i]) for m in mutations}
        for i in range(population)
    )
