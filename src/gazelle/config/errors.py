"""`ConfigError`: one line naming the flag, the bad value and what is allowed."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A bad configuration value; `str(err)` is one line naming the flag."""

    def __init__(self, name: str, value: Any, allowed: str, problem: str | None = None) -> None:
        """`problem` replaces "invalid value <value>" in the message (e.g. "unknown setting")."""
        self.name, self.value, self.allowed = name, value, allowed
        flag = "--" + name.replace("_", "-")
        super().__init__(f"{flag}: {problem or f'invalid value {value!r}'}; allowed: {allowed}")
