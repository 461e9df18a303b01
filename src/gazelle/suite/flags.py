"""The flags of `gazelle suite` itself (the `gazelle train` flags that follow them are added
by the CLI, hidden from its help) and the spec they describe."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

from gazelle.config import ConfigError
from gazelle.config.flags import OneLineParser, number_flag, text_flag
from gazelle.suite.spec import SUITES, SuiteSpec, parse_games, parse_thresholds, read_scores

DESCRIPTION = f"""\
Run a suite of games at a fixed budget per game over seeds, and write a report to cite.
Each (game, seed) is an ordinary `gazelle train` run in its own logdir, OUT/<game>/seed-S,
in a process of its own (a crash ends that run only): one after another on this machine, or
with --suite-backend ray side by side as Ray tasks, placed by Ray (a private Ray instance
here, or the cluster --suite-ray-address names; each task asks for --run-cpus and
--run-gpus; OUT must be on a filesystem every node mounts at the same path). Any
`gazelle train` flag after the suite's own is passed to every run (not --env, --seed,
--logdir, --resume, nor --total-frames with --frames: the suite sets them; a run's own
--backend ray works as in `gazelle train`).

Resumable: the same command again skips finished runs, resumes interrupted ones from their
checkpoints, and leaves failed ones failed (--retry-failed runs them again).

It writes OUT/report.json and OUT/report.md: per game the mean and spread over seeds of the
final score (the recent mean return), the seeds that reached --threshold, the
human-normalised score (Atari-57 and DMLab-30 references built in, or --scores), frames/s
and each run's command; for the suite the median and IQM of the human-normalised scores
with 95% stratified-bootstrap intervals (Agarwal et al. 2021), and OUT/curves.png. A failed
run is listed as failed, never dropped. Exit code 0 when every run finished, 1 otherwise.

Suites: {", ".join(f"{name} ({', '.join(games)})" for name, games in SUITES.items())}."""

#: `gazelle train` flags the suite sets for each run; `total_frames` only with `--frames`.
SET_BY_SUITE = ("env", "seed", "logdir", "resume")


def add_suite_flags(parser: argparse.ArgumentParser) -> None:
    """The suite's own flags."""
    parser.add_argument(
        "--suite",
        type=text_flag,
        required=True,
        metavar="NAME|ENV,ENV,...",
        help=f"a named suite ({', '.join(SUITES)}) or a comma list of env ids",
    )
    parser.add_argument(
        "--seeds",
        type=number_flag(int, 0),
        nargs="+",
        default=[1, 2],
        metavar="S",
        help="the seeds every game runs with (default: 1 2)",
    )
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument(
        "--frames", type=number_flag(int, 1), metavar="N", help="env frames per run"
    )
    budget.add_argument(
        "--minutes",
        type=number_flag(float, above=0.0),
        metavar="M",
        help="minutes of training per run (the run is stopped with SIGINT, as Ctrl-C)",
    )
    parser.add_argument(
        "--out", type=text_flag, required=True, metavar="DIR", help="the suite's directory"
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="ENV=VALUE",
        help="report the seeds whose recent mean return (a full window of 100 episodes) "
        "reached VALUE on ENV (repeatable)",
    )
    parser.add_argument(
        "--scores",
        type=text_flag,
        metavar="FILE",
        help="reference returns, JSON or TOML: env id -> {random, human}; over the built-in "
        "Atari-57 and DMLab-30 tables",
    )
    parser.add_argument(
        "--retry-failed", action="store_true", help="run the failed runs of OUT again"
    )
    parser.add_argument(
        "--suite-backend",
        choices=("local", "ray"),
        default="local",
        help="where the runs go: local (one after another on this machine; the default) or "
        "ray (Ray tasks, side by side; docs/suite.md)",
    )
    parser.add_argument(
        "--suite-ray-address",
        type=text_flag,
        metavar="HOST:PORT|auto",
        help="with --suite-backend ray: join this Ray cluster, as `gazelle train --ray-address` "
        "does (default: a private Ray instance on this machine: loopback, token)",
    )
    parser.add_argument(
        "--suite-ray-allow-tokenless",
        action="store_true",
        help="with --suite-ray-address: join a cluster that answers clients without a token",
    )
    parser.add_argument(
        "--run-cpus",
        type=number_flag(float, above=0.0),
        metavar="N",
        help="with --suite-backend ray: CPUs each run's task asks for (default: --num-actors + 1 "
        "when given; 1 with a run's own --backend ray; else a whole node: the largest node's "
        "CPUs, as a run's layout takes every core of its node)",
    )
    parser.add_argument(
        "--run-gpus",
        type=number_flag(float, 0.0),
        metavar="N",
        help="with --suite-backend ray: GPUs each run's task asks for (default: 1 when the "
        "cluster has a GPU and --device is not cpu, else 0; a task with none sees no GPU)",
    )


def own_parser() -> argparse.ArgumentParser:
    """A parser of the suite's own flags only: what it leaves are the train flags."""
    parser = OneLineParser(prog="gazelle suite", allow_abbrev=False)
    add_suite_flags(parser)
    return parser


def spec_from_args(args: argparse.Namespace, argv: Sequence[str]) -> SuiteSpec:
    """The suite that `args` (every flag, parsed) and `argv` (as typed, after `suite`)
    describe; a ConfigError naming the flag when one is wrong."""
    for name in SET_BY_SUITE + (("total_frames",) if args.frames is not None else ()):
        if hasattr(args, name):
            own = {"env": "--suite", "seed": "--seeds", "total_frames": "--frames"}
            allowed = f"{own[name]} instead" if name in own else "leaving it out"
            raise ConfigError(name, getattr(args, name), allowed, "the suite sets it per run")
    if args.suite_backend != "ray":
        for name in ("suite_ray_address", "suite_ray_allow_tokenless", "run_cpus", "run_gpus"):
            if getattr(args, name) not in (None, False):
                raise ConfigError(name, getattr(args, name), "only with --suite-backend ray")
    elif args.suite_ray_allow_tokenless and args.suite_ray_address is None:
        raise ConfigError("suite_ray_allow_tokenless", True, "only with --suite-ray-address")
    games = parse_games(args.suite)
    seeds = tuple(dict.fromkeys(args.seeds))  # why: a seed given twice runs once
    # why: what the suite's own flags leave of the command line are the train flags, as typed
    _, train_args = own_parser().parse_known_args(list(argv))
    return SuiteSpec(
        name=args.suite,
        games=games,
        seeds=seeds,
        frames=args.frames,
        minutes=args.minutes,
        out=Path(args.out).absolute(),  # why: a Ray task's working folder is not ours
        train_args=tuple(train_args),
        thresholds=parse_thresholds(args.threshold, games),
        scores=read_scores(args.scores) if args.scores else None,
        retry_failed=args.retry_failed,
        backend=args.suite_backend,
        ray_address=args.suite_ray_address,
        ray_allow_tokenless=args.suite_ray_allow_tokenless,
        run_cpus=_run_cpus(args),
        run_gpus=_run_gpus(args),
    )


def _run_cpus(args: argparse.Namespace) -> float | None:
    """`--run-cpus`, or what a run needs by its flags: a run on its own Ray backend needs
    its learner's core (its actors ask Ray for theirs); `--num-actors N` needs N + 1; else
    None (a whole node, read from the cluster: a run's layout takes every core of its node)."""
    if args.run_cpus is not None or args.suite_backend != "ray":
        return args.run_cpus
    if getattr(args, "backend", "local") == "ray":
        return 1.0
    actors = getattr(args, "num_actors", None)
    return None if actors is None else float(actors) + 1.0


def _run_gpus(args: argparse.Namespace) -> float | None:
    """`--run-gpus`, or 0 for a run on `--device cpu`, or None (1 when the cluster has a
    GPU, read from it); a ConfigError for `--device cuda` with `--run-gpus 0`."""
    device = str(getattr(args, "device", "auto"))
    if args.run_gpus == 0 and device.startswith("cuda"):
        raise ConfigError("run_gpus", 0, f"at least 1 with --device {device}, or --device cpu")
    if args.run_gpus is None and device == "cpu" and args.suite_backend == "ray":
        return 0.0
    return args.run_gpus


def suite_command(argv: Sequence[str]) -> str:
    """The suite's command line, for the report."""
    return shlex.join(["gazelle", "suite", *argv])
