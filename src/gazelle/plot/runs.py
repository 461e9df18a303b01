"""Runs for plotting: ``progress.jsonl`` rows, ``config.json``, seeds grouped and averaged.

A run directory is what ``gazelle train`` writes (``gazelle.logging.RunLogger``): one JSON
row per log interval with ``frames``, ``time`` (seconds of training), ``episode_return``
(recent mean, null before the first episode), ``episode_return/<level>`` per level and, for
Atari-57 / DMLab-30 levels, ``scores/human_normalized_cap_100``.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RETURN",
    "SCORE",
    "Group",
    "PlotError",
    "Run",
    "aggregate",
    "group_seeds",
    "load_run",
    "read_progress",
]

RETURN = "episode_return"
SCORE = "scores/human_normalized_cap_100"
PROGRESS_FILE = "progress.jsonl"
#: A run kept in the repository (benchmarks/keep_runs.py): its rows trimmed and gzipped.
KEPT_PROGRESS_FILE = "progress.jsonl.gz"
#: config.json fields that may differ between seeds of one config.
SEED_FIELDS = ("seed", "logdir")

Series = tuple[np.ndarray, np.ndarray]  # (xs, ys), float64 [N] each, sorted by x


class PlotError(ValueError):
    """Nothing to draw (e.g. no episode has finished yet); the message is one line."""


@dataclass(frozen=True)
class Run:
    """One run directory: its name, progress rows (in file order) and config (or None)."""

    name: str
    logdir: Path
    rows: tuple[dict[str, Any], ...]
    config: dict[str, Any] | None

    def series(self, x: str, y: str) -> Series:
        """``(xs, ys)`` over the rows where both fields are finite numbers, sorted by x."""
        return _series(self.rows, x, y)

    def levels(self) -> list[str]:
        """Levels with at least one ``episode_return/<level>`` value, in first-seen order."""
        prefix = RETURN + "/"
        seen: dict[str, None] = {}
        for row in self.rows:
            for key, value in row.items():
                if key.startswith(prefix) and _number(value):
                    seen.setdefault(key[len(prefix) :], None)
        return list(seen)

    def has(self, field: str) -> bool:
        """Whether any row has a finite number for ``field``."""
        return any(_number(row.get(field)) for row in self.rows)


@dataclass(frozen=True)
class Group:
    """Runs drawn as one line: a lone run, or the seeds of one config (mean and band).

    ``name`` is the run's directory name, or for seeds the config (the env, plus the
    fields that tell it from the other runs); the legend adds the seed count.
    """

    name: str
    runs: tuple[Run, ...]
    seeds: bool


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _series(rows: Sequence[dict[str, Any]], x: str, y: str) -> Series:
    both = [row for row in rows if _number(row.get(x)) and _number(row.get(y))]
    points = [(float(row[x]), float(row[y])) for row in both]
    points.sort(key=lambda p: p[0])
    data = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return data[:, 0], data[:, 1]


def _progress_path(logdir: str | Path) -> Path:
    """``logdir/progress.jsonl`` (or ``logdir`` itself when it is that file)."""
    path = Path(logdir)
    if path.is_file():
        return path
    if not path.exists():
        raise FileNotFoundError(f"no run directory {path}")
    for name in (PROGRESS_FILE, KEPT_PROGRESS_FILE):
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(f"no {PROGRESS_FILE} in {path} (not a gazelle run directory?)")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON rows of a progress file (plain or gzipped); a row torn by a crash (bad JSON)
    is skipped."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    rows = []
    for line in data.decode("utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_progress(logdir: str | Path, x: str, y: str) -> Series:
    """``(xs, ys)`` float64 ``[N]`` from ``logdir/progress.jsonl`` (or that file), sorted by x.

    Rows missing ``x`` or ``y``, with a null, or torn by a crash are skipped.
    """
    return _series(read_rows(_progress_path(logdir)), x, y)


def load_run(logdir: str | Path) -> Run:
    """Read a run directory (or its ``progress.jsonl``); ``config.json`` is optional.

    Raises:
        FileNotFoundError: no such directory, or no ``progress.jsonl`` in it.
    """
    progress = _progress_path(logdir)
    config: dict[str, Any] | None = None
    try:
        loaded = json.loads((progress.parent / "config.json").read_text(encoding="utf-8"))
        config = loaded if isinstance(loaded, dict) else None
    except (OSError, json.JSONDecodeError):
        pass
    return Run(progress.parent.name, progress.parent, tuple(read_rows(progress)), config)


def _leaves(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``section.field -> value`` of a nested config (gazelle's sections), or the flat one."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _short(key: str) -> str:
    """The field name of a ``section.field`` leaf."""
    return key.rsplit(".", 1)[-1]


def _settings(config: dict[str, Any]) -> dict[str, str]:
    """The config's leaves as JSON text, without the ones seeds may differ in."""
    return {k: json.dumps(v) for k, v in _leaves(config).items() if _short(k) not in SEED_FIELDS}


def _config_name(own: dict[str, str], differing: Sequence[str]) -> str:
    """The env, then ``field=value`` for each setting that tells this config from others."""
    # why: sorted, and unset ones skipped: an older config's env field and a newer one's
    # (filled in as null) may both be there
    names = (k for k in sorted(own) if (_short(k) == "env" or k == "env.id") and own[k] != "null")
    env = next((json.loads(own[k]) for k in names), "?")
    shown = [f"{_short(k)}={json.loads(own[k]) if k in own else 'unset'}" for k in differing]
    return " ".join([str(env), *(text for text in shown if not text.startswith(("env=", "id=")))])


def group_seeds(runs: Sequence[Run]) -> list[Group]:
    """Group runs whose ``config.json`` match apart from ``seed`` and ``logdir``.

    Works with the sectioned ``config.json`` (``{"run": {"seed": ...}, ...}``) and the flat
    one. A group of several seeds is named after its config (the env, plus the fields that
    tell it from the other runs); a lone run keeps its directory name. Groups keep the
    order in which their first run was given.
    """
    members: dict[str, list[Run]] = {}
    settings: dict[str, dict[str, str]] = {}
    owns = [_settings(run.config) if run.config is not None else None for run in runs]
    every = {k for own in owns if own is not None for k in own}
    for i, (run, own) in enumerate(zip(runs, owns)):
        if own is not None:
            # why: a field that an older gazelle did not write was unset (null) there
            own = {k: own.get(k, "null") for k in every}
        key = json.dumps(own, sort_keys=True) if own is not None else f"run {i}"
        members.setdefault(key, []).append(run)
        if own is not None:
            settings[key] = own
    keys = sorted(every)
    differing = [k for k in keys if len({own.get(k) for own in settings.values()}) > 1]
    lone = [g[0].logdir for k, g in members.items() if not (len(g) > 1 and k in settings)]
    names = _distinct_names(lone)
    groups = []
    for key, group in members.items():
        if len(group) > 1 and key in settings:
            groups.append(Group(_config_name(settings[key], differing), tuple(group), True))
        else:
            groups.append(Group(names[group[0].logdir], tuple(group), seeds=False))
    return groups


def _distinct_names(logdirs: Sequence[Path]) -> dict[Path, str]:
    """Each directory's name, or where names repeat (``a/seed-1``, ``b/seed-1``) the fewest
    trailing path parts that tell it from the others."""
    names = {}
    for logdir in logdirs:
        parts = logdir.parts
        for depth in range(1, len(parts) + 1):
            tail = parts[-depth:]
            # why: unique among every other directory's tail of the same depth
            if all(other == logdir or other.parts[-depth:] != tail for other in logdirs):
                break
        names[logdir] = "/".join(tail)
    return names


def aggregate(
    series: Sequence[Series], center: str = "mean"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean (or median: ``center``), min and max of several seeds' curves, ``(grid, center,
    low, high)`` float64 ``[G]``.

    Each curve is linearly interpolated onto ``grid``: every x of any curve inside the span
    that all curves cover, so no seed is extrapolated. The grid is empty when the spans do
    not overlap (or a curve is empty).
    """
    if not series or any(len(xs) == 0 for xs, _ in series):
        empty = np.zeros(0)
        return empty, empty, empty, empty
    lo = max(float(xs[0]) for xs, _ in series)
    hi = min(float(xs[-1]) for xs, _ in series)
    grid = np.unique(np.concatenate([xs for xs, _ in series]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    stacked = np.stack([np.interp(grid, xs, ys) for xs, ys in series])  # [seeds, G]
    middle = np.median(stacked, axis=0) if center == "median" else stacked.mean(axis=0)
    return grid, middle, stacked.min(axis=0), stacked.max(axis=0)
