"""`gazelle train | test | bench | plot`: the command line.

Flags of `train` are generated from `gazelle.config.ImpalaConfig`, one per field, with the
field's docstring as help, so the CLI and the config never drift apart. A bad value gets one
line naming the flag and what is allowed, never a traceback.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import sys
import time
from collections.abc import Sequence
from typing import Any

from gazelle.config import ConfigError, ImpalaConfig

NEXT_STEPS = """\
Next:
  watch it:      tensorboard --logdir {logdir}      (or: gazelle plot {logdir})
  test it:       gazelle test --logdir {logdir}
  resume it:     gazelle train --logdir {logdir} --total-frames N
  try Atari:     gazelle train --env ALE/Pong-v5 --model shallow --num-actors 2
  check speed:   gazelle bench"""


BENCHES = ("train", "models", "env")


@functools.cache
def field_docs() -> dict[str, str]:
    """Field name -> its docstring (the string literal right after it in the class body)."""
    tree = ast.parse(inspect.getsource(ImpalaConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
        ):
            docs[node.target.id] = str(after.value.value)
    return docs


def _optional(kind: type) -> Any:
    def parse(text: str) -> Any:
        if text.lower() in ("none", "null", "off"):
            return None
        try:
            return kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}; allowed: a {kind.__name__} or 'none'"
            ) from None

    parse.__name__ = kind.__name__
    return parse


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            # why: accept 1e6 for frame counts, but reject 2.5 for an integer flag.
            value = float(text) if kind is int else kind(text)
            if kind is int:
                if value != int(value):
                    raise ValueError
                value = int(value)
            return value
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}; allowed: {'an integer' if kind is int else 'a number'}"
            ) from None

    parse.__name__ = kind.__name__
    return parse


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    docs = field_docs()
    hints = {f.name: f.type for f in dataclasses.fields(ImpalaConfig)}
    for field in dataclasses.fields(ImpalaConfig):
        flag = "--" + field.name.replace("_", "-")
        hint = str(hints[field.name])
        help_text = docs.get(field.name, "") + (
            f" (default: {field.default})" if field.default is not None else ""
        )
        if hint in ("bool", "bool | None"):
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif hint == "str":
            parser.add_argument(flag, type=str, default=argparse.SUPPRESS, help=help_text)
        else:
            kind = int if hint.startswith("int") else float
            parse = _optional(kind) if "None" in hint else _number(kind)
            parser.add_argument(
                flag, type=parse, default=argparse.SUPPRESS, help=help_text, metavar="N"
            )


def config_from_args(args: argparse.Namespace) -> ImpalaConfig:
    # why: unset flags are absent from the namespace (SUPPRESS), so an explicit 'none'
    # (e.g. --grad-norm-clip none) is told apart from "keep the config's default".
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(ImpalaConfig)
        if hasattr(args, f.name)
    }
    if "logdir" not in values:
        env = (values.get("env") or ImpalaConfig.env).replace("/", "_").replace(",", "+")
        values["logdir"] = f"runs/{env[:60]}-{time.strftime('%Y%m%d-%H%M%S')}"
    return ImpalaConfig(**values)


def cmd_train(args: argparse.Namespace) -> int:
    from gazelle.algorithms.impala import train

    config = config_from_args(args)
    print(f"gazelle train: env={config.env} logdir={config.logdir}")
    result = train(config)
    ret = "n/a" if result.recent_return is None else f"{result.recent_return:.2f}"
    print(
        f"done: {result.frames:,} frames, {result.updates} updates, {result.episodes} "
        f"episodes, recent mean return {ret}, {result.fps:,.0f} frames/s"
    )
    print(NEXT_STEPS.format(logdir=result.logdir))
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    from gazelle.evaluate import evaluate

    evaluate(
        args.logdir, episodes=args.episodes, greedy=args.greedy, seed=args.seed, video=args.video
    )
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


def cmd_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gazelle.plot import plot

    out = plot([Path(d) for d in args.logdirs], Path(args.out), x=args.x, y=args.y)
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gazelle", description="Scalable actor-learner RL (IMPALA) in PyTorch."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent (default: CartPole-v1, a few minutes)")
    add_config_flags(train)
    train.add_argument(
        "--algo", choices=["impala"], default="impala", help="algorithm (impala; a3c is planned)"
    )
    test = sub.add_parser("test", help="evaluate a trained run's checkpoint")
    test.add_argument("--logdir", required=True, help="the run's directory")
    test.add_argument("--episodes", type=_number(int), default=10, help="episodes per level")
    test.add_argument("--greedy", action="store_true", help="argmax actions (default: sample)")
    test.add_argument("--seed", type=_number(int), default=1)
    test.add_argument(
        "--video",
        type=_number(int),
        default=0,
        metavar="N",
        help="record the first N episodes of each level as GIFs in <logdir>/videos",
    )
    bench = sub.add_parser("bench", help="measure speed: train (default), models or env")
    bench.add_argument("what", nargs="?", choices=BENCHES, default="train")
    plot = sub.add_parser("plot", help="plot progress.jsonl of one or more runs to a PNG")
    plot.add_argument("logdirs", nargs="+")
    plot.add_argument("--out", default="progress.png")
    plot.add_argument("--x", default="frames")
    plot.add_argument("--y", default="episode_return")
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
    commands = {"train": cmd_train, "test": cmd_test, "plot": cmd_plot}
    return _one_line_errors(parser, args.command, lambda: commands[args.command](args))


def _one_line_errors(parser: argparse.ArgumentParser, command: str, run: Any) -> int:
    """Run a command; a bad flag value (ConfigError, or a ValueError whose message names the
    flag) or a missing file exits 2 with one line instead of a traceback."""
    try:
        return int(run())
    except ConfigError as err:
        parser.exit(2, f"gazelle {command}: error: {err}\n")
    except (ValueError, FileNotFoundError) as err:
        if isinstance(err, ValueError) and not str(err).startswith("--"):
            raise
        parser.exit(2, f"gazelle {command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
