"""The flags of `gazelle tune` itself (the `gazelle train` flags that follow them are added
by the CLI, hidden from its help, and set every member's config) and the spec they
describe."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gazelle.config import Config, ConfigError, all_fields, resolve, validate
from gazelle.config.flags import number_flag, text_flag
from gazelle.config.presets import default_algo
from gazelle.tune.spec import (
    DEFAULT_MUTATIONS,
    Mutation,
    TuneSpec,
    mutable_fields,
    parse_starts,
    starting_values,
)

DESCRIPTION = """\
Population-based training (Jaderberg et al. 2017) on Ray Tune's PopulationBasedTraining:
--population members, each a gazelle run of the `gazelle train` flags that follow (on the
local backend, inside its own Ray Tune trial), trained --frames frames each. Every
--interval frames a member stops (saving its checkpoint, as on Ctrl-C) and reports its
objective to Tune; a member in the bottom --quantile copies a top member's checkpoint
(exploit: gazelle's resume, optimiser state and return window included) and perturbs its
values (explore: x0.8 or x1.2, or drawn afresh with --resample-probability, always within
the bounds). Explored: --learning-rate and --entropy-cost (from the preset's value /10 to
x10 unless given) and every --mutate FIELD.

Ray runs privately on this machine (loopback, token, a 0700 session folder: as
`gazelle train --backend ray`), or on the cluster --ray-address names (refused if it
answers without a token, unless --ray-allow-tokenless). Each member asks Ray for
--member-cpus (default --num-actors + 1: its actors and its learner).

It writes OUT/ray/ (Ray Tune's own experiment: each trial's results, checkpoints and PBT's
pbt_global.txt), OUT/members/member-K/ (the member's gazelle runs, run-0 and one more per
exploit, its schedule.jsonl and console.log), and OUT/summary.json, summary.md and
curves.png: per member the schedule (which member it copied at which frame, which values
it took) and its curve. The same command run again continues a population that stopped
before its end (Ctrl-C, a lost driver): every unfinished member from its last report."""

#: `gazelle train` flags the population sets for each member; placement is tune's own.
SET_BY_TUNE = ("logdir", "total_frames", "backend")
PLACEMENT = ("ray_address", "ray_allow_tokenless", "ray_dashboard")
#: Hidden train flags that mean something to the population as a whole (tune's own).
OWN = (*PLACEMENT, "resume")


def add_tune_flags(parser: argparse.ArgumentParser) -> None:
    """`gazelle tune`'s own flags."""
    add = parser.add_argument
    add("--population", type=number_flag(int, 2), default=4, metavar="N",
        help="members (default: %(default)s)")  # fmt: skip
    add("--frames", type=number_flag(int, 1), required=True, metavar="N",
        help="env frames each member trains (its learning rate decays over them)")  # fmt: skip
    add("--interval", type=number_flag(int, 1), metavar="N",
        help="frames between a member's perturbations (default: --frames / 10)")  # fmt: skip
    add("--out", type=text_flag, required=True, metavar="DIR", help="the population's folder")
    add("--mutate", action="append", default=[], metavar="FIELD=LOW:HIGH|FIELD=A,B,..",
        help="explore this setting of the algorithm (a `gazelle train` flag, underscores or "
        "dashes) within a range (log scale when LOW > 0) or a list; repeatable; also sets "
        "the bounds of learning_rate and entropy_cost")  # fmt: skip
    add("--start", action="append", default=[], metavar="FIELD=V1,V2,..",
        help="each member's starting value of an explored FIELD, one per member (default: "
        "drawn within its bounds)")  # fmt: skip
    add("--objective", type=text_flag, default="auto", metavar="FIELD",
        help="what ranks members: auto (the capped human-normalised score of a multi-task run "
        "where logged, else the recent mean return) or a progress.jsonl field")  # fmt: skip
    add("--synch", action="store_true",
        help="synchronous PBT: members wait for each other at every interval")  # fmt: skip
    add(
        "--quantile",
        type=number_flag(float, 0.0, 0.5),
        default=0.25,
        metavar="F",
        help="the bottom fraction that copies the top fraction (default: %(default)s)",
    )
    add(
        "--resample-probability",
        type=number_flag(float, 0.0, 1.0),
        default=0.25,
        metavar="P",
        help="probability that an explored value is drawn afresh (default: %(default)s)",
    )
    add(
        "--tune-seed",
        type=number_flag(int, 0),
        default=0,
        metavar="S",
        help="seed of PBT's choices and of the starting values drawn (default: %(default)s)",
    )
    add(
        "--member-cpus",
        type=number_flag(float, above=0.0),
        metavar="N",
        help="CPUs each member asks Ray for (default: --num-actors + 1; with --num-actors "
        "unset, the largest node's CPUs / --population, and --num-actors one less)",
    )
    add("--member-gpus", type=number_flag(float, 0.0), metavar="N",
        help="GPUs each member asks Ray for (default: the cluster's GPUs / --population, at "
        "most 1, when it has any and --device is not cpu; else 0)")  # fmt: skip


def show_placement_flags(parser: argparse.ArgumentParser) -> None:
    """The hidden train flags that are tune's own (placement, resume), back in its help."""
    helps = {
        "ray_address": "join this Ray cluster (HOST:PORT or auto) with `gazelle train "
        "--ray-address`'s checks (default: a private Ray instance here: loopback, token)",
        "ray_allow_tokenless": "with --ray-address: join a cluster that answers without a token",
        "ray_dashboard": "the private instance's dashboard, on 127.0.0.1:8265",
        "resume": "continue the population already in --out where it stopped (every "
        "unfinished member from its last report; the same flags are required); "
        "--no-resume refuses an --out that holds one (default: resume)",
    }
    for action in parser._actions:
        if action.dest in helps:
            action.help = helps[action.dest]


def base_config(args: argparse.Namespace) -> Config:
    """The members' common config: the train flags given (a `--config` file under them)."""
    for name in SET_BY_TUNE:
        if hasattr(args, name):
            allowed = {"total_frames": "--frames instead", "backend": "leaving it out (each "
                       "member runs on the local backend in its Ray Tune trial)"}  # fmt: skip
            raise ConfigError(
                name, getattr(args, name), allowed.get(name, "leaving it out"),
                problem="gazelle tune sets it for each member",
            )  # fmt: skip
    values = {n: getattr(args, n) for n in all_fields() if hasattr(args, n) and n not in OWN}
    algo = getattr(args, "algo", None)
    if getattr(args, "config", None):
        from gazelle.config.files import read_settings

        from_file = read_settings(args.config, algo)
        algo = algo or from_file.pop("algo", None)
        values = {
            **{k: v for k, v in from_file.items() if k not in SET_BY_TUNE + OWN},
            **values,
        }
    env = str(values.get("env") or Config().env.id)
    algo = algo or default_algo(env, values.get("preset"))
    return validate(Config.from_flat({"algo": algo, **values}))


def mutations_of(texts: Sequence[str], base: Config) -> tuple[Mutation, ...]:
    """The explored fields: learning_rate and entropy_cost (around the preset's values, for
    the env `base` trains on) unless named, then every `--mutate`; each bound checked as a
    value of the member's config."""
    named = {m.name: m for m in (Mutation.parse(text, base.algo) for text in texts)}
    missing = [name for name in DEFAULT_MUTATIONS if name not in named]
    defaults: dict[str, Mutation] = {}
    if missing:
        from gazelle.algorithms.common import probe

        resolved = resolve(base, probe(base))
        kinds = mutable_fields(base.algo)
        for name in missing:
            value = resolved.get(name)
            if not value or value <= 0:
                raise ConfigError(
                    "mutate", f"{name} (default)", f"--mutate {name}=LOW:HIGH",
                    problem=f"the preset's {name} is {value!r}: no range around it",
                )  # fmt: skip
            defaults[name] = Mutation.around(name, kinds[name], float(value))
    mutations = (*defaults.values(), *named.values())
    for m in mutations:
        ends = m.choices or (m.low, m.high)
        for value in ends:
            try:
                validate(base.replace(**{m.name: m.clip(value) if not m.choices else value}))
            except ConfigError as err:
                flag = "--" + err.name.replace("_", "-")
                problem = f"invalid value {m.describe()!r}: {flag} {value!r} is not allowed"
                raise ConfigError("mutate", value, err.allowed, problem=problem) from None
    return mutations


def spec_from_args(args: argparse.Namespace, argv: Sequence[str]) -> TuneSpec:
    """The population that `args` (every flag, parsed) and `argv` (as typed) describe."""
    base = base_config(args)
    mutations = mutations_of(args.mutate, base)
    given = parse_starts(args.start, mutations, args.population)
    interval = args.interval or max(1, args.frames // 10)
    if interval > args.frames:
        raise ConfigError("interval", interval, f"at most --frames ({args.frames:,})")
    placement: dict[str, Any] = {name: getattr(args, name, None) for name in PLACEMENT}
    if placement["ray_allow_tokenless"] and not placement["ray_address"]:
        raise ConfigError("ray_allow_tokenless", True, "only with --ray-address")
    return TuneSpec(
        base=base,
        mutations=mutations,
        starts=starting_values(mutations, args.population, given, args.tune_seed),
        frames=args.frames,
        interval=interval,
        out=Path(args.out).absolute(),
        objective=args.objective,
        synch=args.synch,
        quantile=args.quantile,
        resample_probability=args.resample_probability,
        tune_seed=args.tune_seed,
        ray_address=placement["ray_address"],
        ray_allow_tokenless=bool(placement["ray_allow_tokenless"]),
        ray_dashboard=bool(placement["ray_dashboard"]),
        member_cpus=args.member_cpus,
        member_gpus=args.member_gpus,
        command=shlex.join(["gazelle", "tune", *argv]),
        resume=bool(getattr(args, "resume", True)),
    )
