"""The learning-curve figure: matplotlib on its Agg canvas (no pyplot, no display needed).

Default panels, side by side: the return against env frames, the return against wall time,
and, when any run's rows carry ``scores/human_normalized_cap_100`` (Atari-57 / DMLab-30),
the human-normalised score against frames. One line per run, or per level when a run has
returns for several levels; seeds of one config are drawn as their mean with a shaded
min-max band. One legend, right of the panels, names every line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter

from gazelle.plot.runs import (
    RETURN,
    SCORE,
    Group,
    PlotError,
    Series,
    aggregate,
    group_seeds,
    load_run,
)

__all__ = ["DPI", "LEGEND_PX", "PANEL_PX", "build_figure", "plot"]

#: Pixel size (width, height) of one panel, the legend's width, and the resolution.
PANEL_PX = (480, 420)
LEGEND_PX = 280
DPI = 100

X_NAMES = {"frames": "env frames", "time": "wall time"}
Y_NAMES = {RETURN: "episode return (recent mean)", SCORE: "score (% of human, capped at 100)"}
TITLES = {RETURN: "return", SCORE: "normalised score"}
TIME_UNITS = ((7200.0, "h", 3600.0), (120.0, "min", 60.0), (0.0, "s", 1.0))


@dataclass(frozen=True)
class Curve:
    """One legend entry in one panel: a run's series, or several seeds' (mean + band)."""

    key: tuple[int, str | None]  # (group index, level): the same key keeps its colour
    label: str
    series: tuple[Series, ...]  # non-empty curves; more than one: mean and min-max band


def _label(group: Group, count: int, level: str | None = None, alone: bool = False) -> str:
    """``name``, ``name (n seeds)``, with ``: level`` (just the level when ``alone``: the
    only group, named in the legend's title)."""
    label = group.name if not group.seeds else f"{group.name} ({count} seed{'s' * (count > 1)})"
    if level is None:
        return label
    return level if alone else f"{label}: {level}"


def _curves(groups: Sequence[Group], x: str, y: str) -> list[Curve]:
    """The curves of one panel; returns of several levels give one curve per level."""
    curves = []
    for index, group in enumerate(groups):
        levels = {lvl: None for run in group.runs for lvl in run.levels()} if y == RETURN else {}
        fields = [(f"{RETURN}/{lvl}", lvl) for lvl in levels] if len(levels) > 1 else [(y, None)]
        for field, level in fields:
            series = tuple(s for s in (run.series(x, field) for run in group.runs) if len(s[0]))
            if series:
                label = _label(group, len(series), level, alone=len(groups) == 1)
                curves.append(Curve((index, level), label, series))
    return curves


def _palette(count: int) -> list[Any]:
    """``count`` distinct colours: tab10, tab20, then evenly spaced along turbo."""
    if count <= 20:
        table = colormaps["tab10" if count <= 10 else "tab20"]
        return [table(i) for i in range(table.N)]  # an int indexes the table's colours
    return [colormaps["turbo"](v) for v in np.linspace(0.05, 0.95, count)]


def _time_unit(seconds: float) -> tuple[str, float]:
    """The unit (s, min or h) and its length in seconds for a time axis up to ``seconds``."""
    return next((unit, scale) for limit, unit, scale in TIME_UNITS if seconds >= limit)


def _draw_panel(
    ax: Axes, curves: Sequence[Curve], x: str, y: str, colours: dict[Any, Any]
) -> dict[str, Any]:
    """Draw ``curves`` on ``ax`` with axis labels; returns legend label -> handle."""
    unit, scale = "", 1.0
    if x == "time":
        unit, scale = _time_unit(max(float(xs[-1]) for c in curves for xs, _ in c.series))
    handles: dict[str, Any] = {}
    for curve in curves:
        colour = colours[curve.key]
        if len(curve.series) == 1:
            xs, ys = curve.series[0]
        else:
            xs, ys, low, high = aggregate(curve.series)
            band = ax.fill_between(xs / scale, low, high, color=colour, alpha=0.25, linewidth=0)
        marker = "o" if len(xs) == 1 else None  # why: a one-point line draws nothing
        (line,) = ax.plot(xs / scale, ys, color=colour, linewidth=1.6, marker=marker)
        handles[curve.label] = line if len(curve.series) == 1 else (band, line)
    ax.set_xlabel(X_NAMES.get(x, x) + (f" ({unit})" if unit else ""))
    ax.set_ylabel(Y_NAMES.get(y, y))
    ax.set_title(f"{TITLES.get(y, y)} vs {X_NAMES.get(x, x)}", fontsize="medium")
    if x == "frames":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 500k, 1M, 2.5M
    ax.grid(alpha=0.3)
    return handles


def build_figure(
    logdirs: Sequence[str | Path],
    x: str | None = None,
    y: str | None = None,
    *,
    size: tuple[int, int] | None = None,
) -> Figure:
    """The learning-curve figure of the runs in ``logdirs`` (not yet saved).

    Args:
        logdirs: run directories (``progress.jsonl``, optional ``config.json``) or
            ``progress.jsonl`` files. Runs whose ``config.json`` match apart from ``seed``
            and ``logdir`` are drawn as one mean line with a min-max band.
        x, y: when either is given, one custom panel of the ``progress.jsonl`` field ``y``
            (default ``episode_return``) against ``x`` (default ``frames``) replaces the
            default panels.
        size: (width, height) in pixels; default ``PANEL_PX`` per panel plus ``LEGEND_PX``.

    Raises:
        FileNotFoundError: a run directory or its ``progress.jsonl`` is missing.
        PlotError: no run has a value to draw yet (e.g. no episode has finished).
    """
    if not logdirs:
        raise PlotError("plot needs at least one run directory")
    runs = [load_run(d) for d in logdirs]
    for flag, field in (("x", x), ("y", y)):
        # why: a field no row has is a typo in the flag (exit 2), not a run without data yet
        if field is not None and not any(field in row for run in runs for row in run.rows):
            known = sorted({k for run in runs for row in run.rows for k in row})
            raise PlotError(
                f"--{flag}: invalid value {field!r}; allowed: a field of progress.jsonl "
                f"({', '.join(known[:8])}{', ...' if len(known) > 8 else ''})"
            )
    groups = group_seeds(runs)
    if x is None and y is None:
        panels = [("frames", RETURN), ("time", RETURN)]
        if any(run.has(SCORE) for run in runs):
            panels.append(("frames", SCORE))
    else:
        panels = [(x or "frames", y or RETURN)]
    curves = [_curves(groups, px, py) for px, py in panels]
    if not curves[0]:
        names = ", ".join(str(run.logdir) for run in runs)
        px, py = panels[0]
        what = "no episode returns yet" if py == RETURN else f"no rows with both {px!r} and {py!r}"
        raise PlotError(f"{what} in {names}: nothing to plot")
    keys = list(dict.fromkeys(c.key for panel in curves for c in panel))
    colours = dict(zip(keys, _palette(len(keys))))

    width, height = size or (PANEL_PX[0] * len(panels) + LEGEND_PX, PANEL_PX[1])
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # why: render with Agg whatever backend pyplot would pick
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, (px, py), panel in zip(axes, panels, curves):
        if panel:
            handles.update(_draw_panel(ax, panel, px, py, colours))
    drawn = {curve.key[0] for curve in curves[0]}
    for index, group in enumerate(groups):
        if index not in drawn:  # a run with nothing to draw yet still gets a legend line
            what = "episode returns" if panels[0][1] == RETURN else panels[0][1]
            handles[f"{group.name}: no {what} yet"] = Line2D([], [], linestyle="none")
    per_level = any(curve.key[1] is not None for panel in curves for curve in panel)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside right upper",
        fontsize="small" if len(handles) <= 20 else "x-small",
        ncol=1 if len(handles) <= 20 else 2,
        title=_label(groups[0], len(groups[0].runs)) if per_level and len(groups) == 1 else None,
        title_fontsize="small",
    )
    return fig


def plot(
    logdirs: Sequence[str | Path],
    out: str | Path,
    x: str | None = None,
    y: str | None = None,
    *,
    size: tuple[int, int] | None = None,
) -> Figure:
    """Draw the learning curves of ``logdirs`` (see `build_figure`) into ``out``.

    The format follows ``out``'s suffix (``.png``, ``.svg``, ``.pdf``, ...; PNG when it has
    none); its directory is created. Returns the figure that was saved.
    """
    out = Path(out)
    kind = out.suffix[1:].lower() or "png"
    supported = FigureCanvasAgg.get_supported_filetypes()
    if kind not in supported:
        known = ", ".join(sorted(supported))
        raise PlotError(f"--out {out}: cannot write .{kind} files; allowed: {known}")
    fig = build_figure(logdirs, x, y, size=size)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=DPI, format=kind)
    except OSError as err:
        raise PlotError(f"--out {out}: cannot write it ({err.strerror or err})") from err
    return fig
