"""`gazelle train --config FILE`: the settings a file names, so that a run can be repeated or
shared; flags given on the command line override them.

A file is JSON (`.json`, a run's own `config.json` included), TOML (`.toml`) or YAML
(`.yaml`, `.yml`; needs PyYAML). It holds the flat names of `gazelle train --help` with
underscores (`batch_size = 8`), or sections as a run's `config.json` nests them (`[impala]`
`batch_size = 8`; the env's id is `id` in `[env]`, the torso `torso` in `[model]`), or both.
Of the algorithm sections only the run's algorithm's is read (a `config.json` holds every
algorithm's). A name the config does not have is refused, naming it. A value of None (null)
means unset. Where a run goes and where it writes (`PLACEMENT_OR_LOGDIR`) are never taken
from a file: a file from someone else must not send this machine's token to a cluster it
names, and a repeated run writes to a fresh folder unless `--logdir` says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from gazelle.config import registry
from gazelle.config.core import Config, all_fields
from gazelle.config.errors import ConfigError
from gazelle.config.sections import COMMON_SECTIONS

#: Settings a file never sets (named on the command line only).
PLACEMENT_OR_LOGDIR = ("backend", "ray_address", "ray_dashboard", "ray_allow_tokenless", "logdir")
SUFFIXES = ".json | .toml | .yaml | .yml"


def read_settings(path: str, algo: str | None = None) -> dict[str, Any]:
    """Flat name -> value of what the file at `path` sets (`algo` included when it names
    one; `algo`, when given, is the command line's and picks the section read)."""
    data = _parse(Path(path))
    names = set(all_fields())
    algorithms = {a: registry.algorithm(a).section for a in registry.algorithm_names()}
    sections = {**COMMON_SECTIONS, **algorithms}
    # why: `env` and `model` are flat names and section names: a section is a table
    tables = {k: v for k, v in data.items() if k in sections and isinstance(v, Mapping)}
    flat: dict[str, Any] = {k: v for k, v in data.items() if k not in tables}
    unknown = sorted(k for k in flat if k not in names and k != "algo")
    own = [s for s in tables if s not in COMMON_SECTIONS]
    algo = algo or flat.get("algo") or (own[0] if len(own) == 1 else None)
    if algo is None and own:
        raise ConfigError("config", path, "a file that names its algo when it has "
                          f"several algorithm sections ({', '.join(own)})")  # fmt: skip
    if algo in own:
        flat.setdefault("algo", algo)
    for section, values in tables.items():
        if section in own and section != algo:
            continue  # why: a config.json holds every algorithm's section; the run's is read
        by_field = {f.name: f.metadata.get("flag", f.name) for f in fields(sections[section])}
        unknown += sorted(f"{section}.{k}" for k in values if k not in by_field)
        flat.update({by_field[k]: v for k, v in values.items() if k in by_field})
    if unknown:
        raise ConfigError(
            "config",
            path,
            "the names of gazelle train --help with underscores, flat or in their sections",
            problem=f"{path} sets what gazelle has no setting for: {', '.join(unknown)}",
        )
    default = Config()
    left_out = [k for k in PLACEMENT_OR_LOGDIR if flat.pop(k, None) not in (None, default.get(k))]
    if left_out:
        print(
            f"gazelle: --config {path}: {', '.join('--' + k.replace('_', '-') for k in left_out)} "
            "not taken from a file (name them on the command line)"
        )
    return {k: v for k, v in flat.items() if v is not None}


def _parse(path: Path) -> dict[str, Any]:
    """The file's top-level mapping (a one-line `ConfigError` on `--config` otherwise)."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text()
        if suffix == ".json":
            data = json.loads(text)
        elif suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError(
                    "config", str(path), "a .json or .toml file, or pip install pyyaml for YAML"
                ) from None
            data = yaml.safe_load(text)
        else:
            raise ConfigError("config", str(path), f"a settings file: {SUFFIXES}")
    except ConfigError:
        raise
    except Exception as err:  # why: every parser's own error type, read or parse
        raise ConfigError(
            "config", str(path), f"a readable {SUFFIXES} file", problem=f"{path}: {err}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("config", str(path), "a file whose top level is a table of settings")
    return data
