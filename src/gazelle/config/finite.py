"""Plain values only: every number a user gives is finite and fits, every text is non-empty.

One check for every numeric flag, wherever the value comes from: `number` parses a flag's
text (the CLI of `gazelle train`, `test`, `bench`), `check` walks a whole `Config` (the
Python API, a saved config). `float("nan")` passes every `<=` test (`nan <= 0` is false)
and `1e400` parses as `inf`; both used to start runs that died later, or tracebacks.
"""

from __future__ import annotations

import math
from typing import Any

from gazelle.config.errors import ConfigError

#: The largest integer a flag takes: what a torch/numpy int64 counter holds.
INT_MAX = 2**63 - 1

#: Fields where infinity is a documented setting (written `inf`, never an overflow such as
#: 1e400): what it means.
INFINITE_OK = {"grad_norm_clip": "no clipping"}
INFINITY = ("inf", "+inf", "infinity")


def describe(kind: type) -> str:
    """What a flag of `kind` allows, for its error line."""
    if kind is int:
        return "an integer below 2**63"
    return "a finite number"


def number(text: str, kind: type, infinite_ok: bool = False) -> int | float:
    """The value of a numeric flag's `text`: ints accept `1e6` but not `2.5`; NaN, infinite
    values and overflow (`1e400`, an int beyond int64) are refused, but for the literal
    `inf` where `infinite_ok` (a field of `INFINITE_OK`).

    Raises ValueError (`invalid value 'TEXT'; allowed: ...`, one line) otherwise."""
    if infinite_ok and kind is float and text.strip().lower() in INFINITY:
        return math.inf
    bad = ValueError(f"invalid value {text!r}; allowed: {describe(kind)}")
    try:
        value = float(text)
    except ValueError:
        raise bad from None
    if not math.isfinite(value):
        raise bad
    if kind is not int:
        return value
    stripped = text.strip().lstrip("+-")
    if stripped.isdigit():
        whole = int(text)  # why: exact, where float(text) rounds a large int
    elif value == int(value):
        whole = int(value)
    else:
        raise bad
    if abs(whole) > INT_MAX:
        raise bad
    return whole


def check(config: Any) -> None:
    """Refuse (`ConfigError` naming the flag) a non-finite number, an integer beyond int64
    or an empty text in any field of `config` (its flat view: the common sections and the
    algorithm that runs)."""
    for name, value in config.flat().items():
        check_value(name, value)


def check_value(name: str, value: Any) -> None:
    """One field's value (see `check`); None and booleans pass."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        if value == math.inf and name in INFINITE_OK:
            return
        raise ConfigError(name, value, describe(float))
    if isinstance(value, int) and abs(value) > INT_MAX:
        raise ConfigError(name, value, describe(int))
    if isinstance(value, str) and not value.strip():
        raise ConfigError(name, value, "a non-empty value, or leave the flag out")
