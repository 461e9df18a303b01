"""`OUT/curves.png`: the population at a glance, drawn as `gazelle plot` draws runs
(matplotlib's Agg canvas, the same panel size and palette).

Left: each member's curve (what ranks it: the recent mean return, or the capped
human-normalised score) against its frames, one line per run folder; an exploit is a dashed
line from where the member stopped to where it took over the other member's run, with a
cross. Right: one panel per explored field, each member's value against frames.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from gazelle.plot.figure import DPI, LEGEND_PX, PANEL_PX
from gazelle.plot.runs import read_rows
from gazelle.tune.member import objective
from gazelle.tune.spec import TuneSpec


def curve_field(spec: TuneSpec, rows: list[dict[str, Any]]) -> str:
    """The progress field a member's curve shows: what ranks it."""
    if spec.objective != "auto":
        return spec.objective
    probe: dict[str, Any] = next(
        (r for r in reversed(rows) if objective(r, "auto") is not None), {}
    )
    levels = [key for key in probe if key.startswith("episode_return/")]
    return (
        "scores/human_normalized_cap_100"
        if len(levels) > 1 and probe.get("scores/human_normalized_cap_100") is not None
        else "episode_return"
    )


def _points(rows: list[dict[str, Any]], field: str) -> tuple[list[float], list[float]]:
    kept = [(r["frames"], r[field]) for r in rows if r.get(field) is not None and "frames" in r]
    return [float(x) for x, _ in kept], [float(y) for _, y in kept]


def _runs(member: dict[str, Any]) -> list[list[dict[str, Any]]]:
    out = []
    for run in member.get("runs", []):
        path = Path(run) / "progress.jsonl"
        out.append(read_rows(path) if path.is_file() else [])
    return out


def draw(spec: TuneSpec, summary: dict[str, Any], out: Path) -> None:
    """Write the figure of `summary` (`gazelle.tune.summary.summarize`) to `out`."""
    members = summary["members"]
    runs = {name: _runs(m) for name, m in members.items()}
    all_rows = [row for rows in runs.values() for run in rows for row in run]
    field = curve_field(spec, all_rows)
    panels = 1 + len(spec.mutations)
    width, height = PANEL_PX[0] * panels + LEGEND_PX, PANEL_PX[1]
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, panels, squeeze=False)[0]
    from matplotlib import colormaps

    palette = colormaps["tab10" if len(members) <= 10 else "turbo"]
    handles = []
    for index, (name, member) in enumerate(members.items()):
        colour = palette(index if len(members) <= 10 else index / max(len(members) - 1, 1))
        previous: tuple[float, float] | None = None
        for run_index, rows in enumerate(runs[name]):
            xs, ys = _points(rows, field)
            if not xs:
                continue
            if run_index > 0 and previous is not None:
                axes[0].plot(
                    [previous[0], xs[0]], [previous[1], ys[0]], color=colour, linestyle="--",
                    linewidth=1.0,
                )  # fmt: skip
                axes[0].plot([xs[0]], [ys[0]], color=colour, marker="x", markersize=8)
            (line,) = axes[0].plot(
                xs, ys, color=colour, linewidth=1.6, marker="o" if len(xs) == 1 else None
            )
            if run_index == 0:
                line.set_label(f"{name} ({len(member.get('exploits', []))} exploits)")
                handles.append(line)
            previous = (xs[-1], ys[-1])
        for axis, mutation in zip(axes[1:], spec.mutations, strict=True):
            steps = [(s["from_frames"], s["values"][mutation.name]) for s in member["schedule"]]
            if not steps:
                continue
            steps.append((member["frames"], steps[-1][1]))
            axis.plot(
                [float(x) for x, _ in steps], [float(v) if not isinstance(v, str) else v
                                               for _, v in steps],
                color=colour, drawstyle="steps-post", marker=".",
            )  # fmt: skip
    axes[0].set_ylabel(field)
    axes[0].set_title(f"{field} (x: took over a better member)", fontsize="medium")
    for axis, mutation in zip(axes[1:], spec.mutations, strict=True):
        axis.set_title(f"{mutation.name}", fontsize="medium")
        if mutation.log:
            axis.set_yscale("log")
    for axis in axes:
        axis.set_xlabel("env frames")
        axis.xaxis.set_major_formatter(EngFormatter(sep=""))
        axis.grid(alpha=0.3)
    if handles:
        figure.legend(handles=handles, loc="center right", fontsize="small")
    figure.subplots_adjust(left=0.06, right=1 - LEGEND_PX / width - 0.01, bottom=0.14, wspace=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(str(out))
