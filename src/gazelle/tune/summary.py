"""The population's summary, written by the driver from the members' files when Ray Tune is
done (or stopped):

- `OUT/summary.json`: per member its status, final frames and objective, its hyperparameter
  schedule (the values it trained with from which frame, and where they came from: its
  start, or the member it copied at which frame), every exploit, its run folders; the best
  and the median member;
- `OUT/summary.md`: the same as tables;
- `OUT/curves.png`: each member's curve and schedule (`gazelle.tune.figure`).

Each member's files are `OUT/members/<member>/`: `schedule.jsonl` (its events, as
`gazelle.tune.member` wrote them), `run-K/` (a gazelle run folder per start: `run-0` from
scratch, one more per exploit, with `progress.jsonl`, TensorBoard events, checkpoints),
`console.log`.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from gazelle.tune.member import read_journal, run_folders
from gazelle.tune.spec import TuneSpec

SUMMARY_JSON, SUMMARY_MD, FIGURE = "summary.json", "summary.md", "curves.png"


def _number(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def member_summary(home: Path, budget: int) -> dict[str, Any]:
    """One member's summary from its folder."""
    events = read_journal(home)
    reports = [e for e in events if e["event"] == "report"]
    schedule, exploits = [], []
    for event in events:
        if event["event"] == "start":
            schedule.append({"from_frames": 0, "values": event["values"], "source": "start"})
        elif event["event"] == "exploit":
            copied = {
                "frames": event["frames"],
                "copied": event["copied"],
                "own_frames": event["own_frames"],
                "own_values": event["own_values"],
                "values": event["values"],
                "run": event["run"],
            }
            exploits.append(copied)
            source = f"copied {event['copied']} at {event['frames']:,} frames"
            schedule.append(
                {"from_frames": event["frames"], "values": event["values"], "source": source}
            )
    failed = [e for e in events if e["event"] == "failed"]
    last = reports[-1] if reports else None
    if failed:
        status = "failed"
    elif last is not None and last["frames"] >= budget:
        status = "done"
    else:
        status = "stopped"
    return {
        "status": status,
        "error": failed[-1]["error"] if failed else None,
        "frames": last["frames"] if last else 0,
        "objective": _number(last["objective"]) if last else None,
        "episode_return": _number(last.get("episode_return")) if last else None,
        "schedule": schedule,
        "exploits": exploits,
        "reports": [
            {k: r.get(k) for k in ("frames", "objective", "episode_return", "values", "run")}
            for r in reports
        ],
        "runs": [str(path) for path in run_folders(home)],
        "console": str(home / "console.log"),
    }


def summarize(spec: TuneSpec) -> dict[str, Any]:
    """The summary of the population in `spec.out` (members that never started are listed
    with status "not started")."""
    members: dict[str, Any] = {}
    for index in range(spec.population):
        name = f"member-{index}"
        home = spec.out / "members" / name
        if home.is_dir():
            members[name] = member_summary(home, spec.frames)
        else:
            members[name] = {"status": "not started", "frames": 0, "objective": None}
    scored = {n: m["objective"] for n, m in members.items() if m["objective"] is not None}
    best = max(scored, key=lambda n: scored[n]) if scored else None
    return {
        "command": spec.command,
        "population": spec.population,
        "frames_per_member": spec.frames,
        "interval": spec.interval,
        "objective": spec.objective,
        "synch": spec.synch,
        "quantile": spec.quantile,
        "resample_probability": spec.resample_probability,
        "explored": [m.describe() for m in spec.mutations],
        "members": members,
        "best": None if best is None else {"member": best, "objective": scored[best]},
        "median": statistics.median(scored.values()) if scored else None,
        "scored": f"{len(scored)} of {spec.population}",
        "exploits": sum(len(m.get("exploits", [])) for m in members.values()),
        "ray_tune": str(spec.out / "ray"),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return str(value)


def markdown(summary: dict[str, Any]) -> str:
    """`summary.md`: the members' results and schedules as tables."""
    lines = [
        "# Population-based training",
        "",
        f"`{summary['command']}`" if summary["command"] else "",
        "",
        f"{summary['population']} members, {summary['frames_per_member']:,} frames each, "
        f"perturbed every {summary['interval']:,} frames; explored: "
        f"{'; '.join(summary['explored'])}. Objective: {summary['objective']}. Scored: "
        f"{summary['scored']}; best: {_fmt(summary['best'])}; median "
        f"{_fmt(summary['median'])}; exploits: {summary['exploits']}.",
        "",
        "| member | status | frames | objective | return | exploits | last values |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in summary["members"].items():
        values = m["schedule"][-1]["values"] if m.get("schedule") else None
        lines.append(
            f"| {name} | {m['status']} | {m['frames']:,} | {_fmt(m['objective'])} | "
            f"{_fmt(m.get('episode_return'))} | {len(m.get('exploits', []))} | {_fmt(values)} |"
        )
    for name, m in summary["members"].items():
        if not m.get("schedule"):
            continue
        lines += ["", f"## {name}", "", "| from frame | values | from |", "|---|---|---|"]
        lines += [
            f"| {s['from_frames']:,} | {_fmt(s['values'])} | {s['source']} |" for s in m["schedule"]
        ]
        if m.get("error"):
            lines += ["", f"Failed: {m['error']}"]
    lines += ["", f"Curves: `{FIGURE}`. Ray Tune's own logs: `{summary['ray_tune']}`.", ""]
    return "\n".join(lines)


def write_summary(spec: TuneSpec, figure: bool = True) -> dict[str, Any]:
    """Write `summary.json`, `summary.md` and (with `figure`) `curves.png`; returns it."""
    summary = summarize(spec)
    (spec.out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    (spec.out / SUMMARY_MD).write_text(markdown(summary))
    if figure:
        from gazelle.tune.figure import draw

        draw(spec, summary, spec.out / FIGURE)
    return summary
