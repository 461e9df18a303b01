"""The types of the command lines' flags, and a parser whose errors are one line.

Every numeric flag of `gazelle train | test | bench` parses through `number_flag` (finite,
an integer where one is meant, in range: `gazelle.config.finite`), every text flag through
`text_flag` (never empty), and every parser is a `OneLineParser`: a bad value is one line
naming the flag and what is allowed, exit code 2, never the usage block or a traceback.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from gazelle.config import finite


def optional_number_flag(kind: type, infinite: str | None = None) -> Any:
    """A numeric flag that also takes 'none' (back to the preset's choice), and 'inf' where
    `infinite` says what it means."""
    extra = f", 'inf' ({infinite})" if infinite else ""

    def parse(text: str) -> Any:
        if text.lower() in ("none", "null", "off"):
            return None
        try:
            return finite.number(text, kind, infinite_ok=infinite is not None)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}; allowed: {finite.describe(kind)}{extra} or 'none'"
            ) from None

    parse.__name__ = kind.__name__
    return parse


def number_flag(
    kind: type, low: float | None = None, high: float | None = None, *, above: float | None = None
) -> Any:
    """A numeric flag: finite, an integer where `kind` is int (1e6 is one, 2.5 is not),
    within [`low`, `high`] and greater than `above` where given."""
    word = "an integer" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = finite.number(text, kind)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(
                f"invalid value {text!r}; allowed: {word} greater than {above}"
            )
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"in [{low}, {high}]" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"invalid value {text!r}; allowed: {word} {bounds}")
        return value

    parse.__name__ = kind.__name__
    return parse


def text_flag(text: str) -> str:
    """A flag's text: anything but empty (an empty path would mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"invalid value {text!r}; allowed: a non-empty value")
    return text


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line (`gazelle train: error: ...`, exit code
    2) without the usage block (`--help` prints it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # why: quoted, so that an empty or odd argument shows in the one line
            self.error(f"unrecognized arguments: {' '.join(repr(a) for a in extra)}")
        return parsed


def module_flag(text: str) -> str:
    """A module's dotted name (`mypkg.nets`)."""
    if not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}; allowed: a module's dotted name, e.g. mypkg.nets"
        )
    return text
