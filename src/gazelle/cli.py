"""`gazelle train | test | bench | plot | suite | tune`: the command line.

Flags of `train` are generated from the sections of `gazelle.config.Config`, one per field,
with the field's docstring as help, so the CLI and the config never drift apart. A bad value
gets one line naming the flag and what is allowed, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gazelle.config import Config, ConfigError, all_fields, finite, registry
from gazelle.config.flags import (
    OneLineParser,
    module_flag,
    number_flag,
    optional_number_flag,
    text_flag,
)
from gazelle.config.presets import default_algo, fresh_logdir
from gazelle.config.validation import SEED_MAX

NEXT_STEPS = """\
Next:
  watch it:      tensorboard --logdir {logdir}      (or: gazelle plot {logdir})
  test it:       gazelle test --logdir {logdir}
  resume it:     gazelle train --logdir {logdir} --total-frames N
  try Atari:     gazelle train --env PongNoFrameskip-v4
  check speed:   gazelle bench"""


BENCHES = ("train", "models", "env")


def field_docs() -> dict[str, str]:
    """Flag name (underscores) -> the docstring of its config field."""
    return {name: flat.doc for name, flat in all_fields().items()}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per config field (`gazelle.config.all_fields`), help from its docstring."""
    parser.add_argument(
        "--algo",
        type=text_flag,
        default=argparse.SUPPRESS,
        metavar="NAME",
        help=f"the algorithm: {' | '.join(registry.algorithm_names())} (default: the --preset's, "
        "impala for impala-paper and a3c for universe-starter; else appo for ViZDoom ids "
        "and continuous control (a float Box action, vector observations), impala otherwise)",
    )
    for name, flat in all_fields().items():
        flag = "--" + name.replace("_", "-")
        hint = flat.type
        help_text = " ".join(flat.doc.split()) + (
            f" (default: {flat.default})" if flat.default is not None else ""
        )
        if hint in ("bool", "bool | None"):
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif hint in ("str", "str | None"):
            parser.add_argument(flag, type=str, default=argparse.SUPPRESS, help=help_text)
        else:
            kind = int if hint.startswith("int") else float
            infinite = finite.INFINITE_OK.get(name)
            optional = "None" in hint
            parse = optional_number_flag(kind, infinite) if optional else number_flag(kind)
            parser.add_argument(
                flag, type=parse, default=argparse.SUPPRESS, help=help_text, metavar="N"
            )


def config_from_args(args: argparse.Namespace) -> Config:
    """The config of the flags given; a flag left out keeps the field's default, or, when
    `--logdir` holds a run to resume, that run's setting (its algorithm, env, budget, ...:
    `gazelle train --logdir DIR --total-frames N` continues any run), except where it runs
    (`PLACEMENT`). A saved torso or env that would import a module needs the user's say
    (`gazelle.algorithms.imports`)."""
    # why: unset flags are absent from the namespace (SUPPRESS), so an explicit 'none'
    # (e.g. --grad-norm-clip none) is told apart from "keep the config's default".
    values = {name: getattr(args, name) for name in all_fields() if hasattr(args, name)}
    given = set(values)
    algo_given = getattr(args, "algo", None)
    from_file: dict[str, Any] = {}
    if getattr(args, "config", None):
        from gazelle.config.files import read_settings

        # why: a file's settings as if typed before the flags, which override them
        from_file = read_settings(args.config, algo_given)
        algo_given = algo_given or from_file.pop("algo", None)
        values = {**from_file, **values}
    from gazelle.algorithms.continuing import continue_saved

    allow = getattr(args, "allow_import", None) or ()
    continued = continue_saved(values, algo_given, allow, given)
    if continued is not None:
        return continued
    env = str(values.get("env") or Config().env.id)
    algo = algo_given or default_algo(env, values.get("preset"))
    registry.algorithm(algo)  # why: an unknown name fails here, in one line naming the known
    if values.get("logdir") is None:
        values["logdir"] = fresh_logdir(env)
    config = Config.from_flat({"algo": algo, **values})
    if from_file:
        from gazelle.algorithms.imports import check_saved

        # why: a file may come from someone else: its torso or env imports nothing unasked
        taken = [name for name in ("model", "env") if name in from_file and name not in given]
        check_saved(config, args.config, getattr(args, "allow_import", None) or (), taken)
    return config


def cmd_train(args: argparse.Namespace) -> int:
    from gazelle.algorithms import train

    config = config_from_args(args)
    print(f"gazelle train: algo={config.algo} env={config.env.id} logdir={config.run.logdir}")
    result = train(config)
    ret = "n/a" if result.recent_return is None else f"{result.recent_return:.2f}"
    print(
        f"done: {result.frames:,} frames, {result.updates} updates, {result.episodes} "
        f"episodes, recent mean return {ret}, {result.fps:,.0f} frames/s"
    )
    if result.target_reached_at is not None:
        print(
            f"stopped at --target-return {config.run.target_return:g}: reached at "
            f"{result.target_reached_at:,} frames"
        )
    print(NEXT_STEPS.format(logdir=result.logdir))
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    from gazelle.algorithms.runstate import interruptible
    from gazelle.evaluation import evaluate

    try:
        # why: SIGTERM too ends it through the `finally`s that close the envs (a ViZDoom
        # engine is a process of its own that outlives a killed parent).
        with interruptible():
            evaluate(
                args.logdir, episodes=args.episodes, greedy=args.greedy, seed=args.seed,
                video=args.video, allow_imports=args.allow_import or (),
            )  # fmt: skip
    except KeyboardInterrupt:
        print("gazelle test: stopped; no results written", file=sys.stderr)
        return 130
    return 0


def cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    if args.what == "models":
        from gazelle.bench import models

        models.main(rest)
    elif args.what == "env":
        from gazelle.bench import env

        env.main(rest)
    else:
        from gazelle.bench import train as train_bench

        train_bench.main(rest)
    return 0


PLOT_HELP = """\
Draw the learning curves of runs from their progress.jsonl, in one figure:
  - the return (mean of the recent episodes) against env frames, and against wall time;
  - the human-normalised score (capped at 100) against frames, for Atari-57 / DMLab-30 runs.
One line per run, or per level when a run has returns for several levels. Runs whose
config.json match apart from seed and logdir are seeds of one config: drawn as their mean
with a shaded min-max band, labelled with the config and the number of seeds.
--x / --y replace these panels by one panel of any two progress.jsonl fields, e.g.
  gazelle plot runs/a --y losses/total"""


def cmd_plot(args: argparse.Namespace) -> int:
    from gazelle.plot import PlotError, plot

    try:
        plot(args.logdirs, args.out, x=args.x, y=args.y)
    except PlotError as err:
        if str(err).startswith("--"):  # a bad flag value: as every other, exit code 2
            raise ValueError(str(err)) from err
        print(f"gazelle plot: {err}", file=sys.stderr)  # e.g. no episode has finished yet
        return 1
    print(f"wrote {args.out}")
    return 0


def cmd_suite(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from gazelle.suite import run_suite, write_report
    from gazelle.suite.flags import spec_from_args, suite_command

    spec = spec_from_args(args, argv)
    command = suite_command(argv)
    print(f"gazelle suite: {len(spec.games)} games x {len(spec.seeds)} seeds in {spec.out}")
    try:
        counts = run_suite(spec)
    except KeyboardInterrupt:
        write_report(spec, command)
        print(f"gazelle suite: stopped; rerun the same command to resume ({spec.out})")
        return 130
    report = write_report(spec, command)
    agg = report["aggregate"]
    if "median" in agg:
        print(
            f"human-normalised: median {agg['median']['value']:.1f}, "
            f"IQM {agg['iqm']['value']:.1f} over {len(agg['games'])} games"
        )
    print(f"wrote {spec.out / 'report.md'} and report.json ({counts})")
    done = all(run["status"] == "done" for run in report["runs"])
    return 0 if done else 1


def cmd_tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from gazelle.tune import run_tune
    from gazelle.tune.flags import spec_from_args

    spec = spec_from_args(args, argv)
    print(f"gazelle tune: {spec.population} members, {spec.frames:,} frames each, in {spec.out}")
    summary = run_tune(spec)
    best = summary["best"]
    if best is not None:
        print(
            f"best: {best['member']} {best['objective']:.4g}, median {summary['median']:.4g} "
            f"({summary['scored']} scored, {summary['exploits']} exploits)"
        )
    print(f"wrote {spec.out / 'summary.md'}, summary.json and curves.png")
    done = all(m["status"] == "done" for m in summary["members"].values())
    if not done:
        print("gazelle tune: the population stopped before its end; the same command "
              "continues it (every unfinished member from its last report)")  # fmt: skip
    return 0 if done else 1


def _add_train_flags(parser: argparse.ArgumentParser, hidden: bool = False) -> None:
    """`gazelle train`'s flags (every config field, --allow-import, --config); `hidden`:
    kept out of the help (`gazelle suite` passes them on)."""
    first = len(parser._actions)
    add_config_flags(parser)
    _add_allow_import(parser)
    parser.add_argument(
        "--config",
        type=text_flag,
        metavar="FILE",
        help="settings from a file: a run's config.json, or JSON/TOML/YAML of the names above "
        "with underscores, flat or by section; flags given override it; never --logdir or "
        "where the run goes (--backend, --ray-*)",
    )
    if hidden:
        for action in parser._actions[first:]:
            action.help = argparse.SUPPRESS


def _add_allow_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-import",
        type=module_flag,
        action="append",
        metavar="MODULE",
        help="let a saved run (resume, or the run `gazelle test` loads) import MODULE for its "
        "torso (`--model module:attr`) or env (`module:EnvId`); without it a run folder "
        "imports nothing this command does not name (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gazelle", description="Scalable actor-learner RL (IMPALA, APPO, A3C) in PyTorch."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent (default: CartPole-v1, about a minute)")
    _add_train_flags(train)
    test = sub.add_parser("test", help="evaluate a trained run's checkpoint")
    test.add_argument("--logdir", type=text_flag, required=True, help="the run's directory")
    test.add_argument("--episodes", type=number_flag(int, 1), default=10, help="episodes per level")
    test.add_argument("--greedy", action="store_true", help="argmax actions (default: sample)")
    test.add_argument("--seed", type=number_flag(int, 0, SEED_MAX), default=1)
    _add_allow_import(test)
    test.add_argument(
        "--video",
        type=number_flag(int, 0),
        default=0,
        metavar="N",
        help="record the first N episodes of each level as GIFs in <logdir>/videos",
    )
    bench = sub.add_parser("bench", help="measure speed: train (default), models or env")
    bench.add_argument("what", nargs="?", choices=BENCHES, default="train")
    plot = sub.add_parser(
        "plot",
        help="draw the learning curves of one or more runs to a PNG",
        description=PLOT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plot.add_argument(
        "logdirs", nargs="+", type=text_flag, metavar="LOGDIR", help="run directories"
    )
    plot.add_argument(
        "--out",
        type=text_flag,
        default="progress.png",
        help="image to write (default: %(default)s)",
    )
    plot.add_argument(
        "--x",
        type=text_flag,
        metavar="FIELD",
        help="one custom panel: this progress.jsonl field on x (frames)",
    )
    plot.add_argument(
        "--y",
        type=text_flag,
        metavar="FIELD",
        help="one custom panel: this field on y (episode_return)",
    )
    from gazelle.suite.flags import DESCRIPTION, add_suite_flags

    suite = sub.add_parser(
        "suite",
        help="run a suite of games (atari5, or ENV,ENV,...) over seeds; report it",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_suite_flags(suite)
    _add_train_flags(suite, hidden=True)
    from gazelle.tune.flags import DESCRIPTION as TUNE_DESCRIPTION
    from gazelle.tune.flags import add_tune_flags, show_placement_flags

    tune = sub.add_parser(
        "tune",
        help="population-based training of a population of runs on Ray Tune",
        description=TUNE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_tune_flags(tune)
    _add_train_flags(tune, hidden=True)
    show_placement_flags(tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        # why: `gazelle bench [X] --flags` hands its flags to the bench module's own parser.
        what = argv[1] if len(argv) > 1 and argv[1] in BENCHES else "train"
        rest = argv[2:] if len(argv) > 1 and argv[1] in BENCHES else argv[1:]
        return _one_line_errors(
            parser, "bench", lambda: cmd_bench(argparse.Namespace(what=what), rest)
        )
    args = parser.parse_args(argv)
    commands = {
        "train": cmd_train,
        "test": cmd_test,
        "plot": cmd_plot,
        "suite": lambda args: cmd_suite(args, argv[1:]),
        "tune": lambda args: cmd_tune(args, argv[1:]),
    }
    return _one_line_errors(parser, args.command, lambda: commands[args.command](args))


def _one_line_errors(parser: argparse.ArgumentParser, command: str, run: Any) -> int:
    """Run a command; a bad flag value (ConfigError, or a ValueError whose message names the
    flag) or a missing file exits 2 with one line instead of a traceback, and a run that had
    to stop (`RunError`: a full disk, a failed fleet, non-finite updates, a private Ray
    instance that is not private) exits 1 with one line."""
    from gazelle.checkpoint import CheckpointError, CheckpointNotFoundError
    from gazelle.errors import RunError

    try:
        return int(run())
    except ConfigError as err:
        parser.exit(2, f"gazelle {command}: error: {err}\n")
    except RunError as err:
        parser.exit(1, f"gazelle {command}: error: {err}\n")
    except CheckpointError as err:
        if isinstance(err, CheckpointNotFoundError):
            parser.exit(2, f"gazelle {command}: error: {err}\n")
        hint = "another --logdir or --no-resume" if command == "train" else "another --logdir"
        parser.exit(
            2, f"gazelle {command}: error: {err}; allowed: a gazelle checkpoint, or {hint}\n"
        )
    except (ValueError, FileNotFoundError) as err:
        if isinstance(err, ValueError) and not str(err).startswith("--"):
            raise
        parser.exit(2, f"gazelle {command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
