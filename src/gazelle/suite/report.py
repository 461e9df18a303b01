"""The suite's report, read from the runs' own files: `report.json` (every number, every
run's command) and `report.md` (the same as tables), and `curves.png` (`gazelle.plot`).

A run's final score is the last progress row's `episode_return`: the mean return of its
recent episodes (up to 100), as `gazelle train` reports it. Only runs that finished (status
`done`) with at least one episode are scored; every other run is listed with its status and
counts as "not reached" for a threshold, never dropped.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from gazelle.envs.scores import ATARI57, DMLAB30
from gazelle.suite import stats
from gazelle.suite.pairs import Pair, command_line, pairs, read_rows, read_status
from gazelle.suite.spec import SuiteSpec

#: Bootstrap replicates and generator seed of the suite's confidence intervals.
BOOTSTRAP_REPS = 10_000
BOOTSTRAP_SEED = 0


def reference(spec: SuiteSpec, game: str) -> tuple[float, float] | None:
    """(random, human) returns of `game`: the user's `--scores` first, then gazelle's
    Atari-57 and DMLab-30 tables; None when none knows it."""
    if spec.scores and game in spec.scores:
        return spec.scores[game]
    for table in (ATARI57, DMLAB30):
        try:
            return tuple(table.scores[table.canonical(game)])  # type: ignore[return-value]
        except ValueError:
            continue
    return None


def run_result(spec: SuiteSpec, pair: Pair) -> dict[str, Any]:
    """One run's line of the report, from its status file and progress.jsonl."""
    status = read_status(pair)
    rows = read_rows(pair.logdir)
    last = rows[-1] if rows else {}
    frames, seconds = int(last.get("frames") or 0), float(last.get("time") or 0.0)
    final = last.get("episode_return")
    result: dict[str, Any] = {
        "game": pair.game,
        "seed": pair.seed,
        "status": status["status"],
        "command": status.get("command") or command_line(spec, pair),
        "logdir": str(pair.logdir),
        "attempts": status.get("attempts", 0),
        "error": status.get("error"),
        "frames": frames,
        "train_seconds": seconds,
        "fps": frames / seconds if seconds > 0 else None,
        "final_return": None if final is None else float(final),
        "episode_window": last.get("episode_window"),
    }
    threshold = (spec.thresholds or {}).get(pair.game)
    if threshold is not None:
        # why: here, not at the top: gazelle.logging imports torch (1.5 s), and the CLI
        # imports this module to build its parser (`gazelle --help`, a bad flag's error)
        from gazelle.logging import RETURN_WINDOW

        reached = next(
            (
                int(row["frames"])
                for row in rows
                if row.get("episode_return") is not None
                and row["episode_return"] >= threshold
                and int(row.get("episode_window") or 0) >= RETURN_WINDOW
            ),
            None,
        )
        result["reached_at_frames"] = reached
    ref = reference(spec, pair.game)
    if ref is not None and result["final_return"] is not None:
        random, human = ref
        result["human_normalized"] = 100.0 * (result["final_return"] - random) / (human - random)
    return result


def _scored(run: dict[str, Any]) -> bool:
    return run["status"] == "done" and run["final_return"] is not None


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    array = np.asarray(values)
    std = float(array.std(ddof=1)) if len(values) > 1 else 0.0
    return {
        "mean": float(array.mean()),
        "std": std,
        "min": float(array.min()),
        "max": float(array.max()),
    }


def game_summary(spec: SuiteSpec, game: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per game: the spread of the final return over its scored seeds, the human-normalised
    score, the seeds that reached its threshold (out of all its seeds), frames/s."""
    scored = [run for run in runs if _scored(run)]
    summary: dict[str, Any] = {
        "seeds_scored": f"{len(scored)} of {len(runs)}",
        "final_return": _spread([run["final_return"] for run in scored]),
        "not_scored": {str(run["seed"]): run["status"] for run in runs if not _scored(run)},
        "fps": _spread([run["fps"] for run in runs if run["fps"] is not None])["mean"],
        "reference": None if (ref := reference(spec, game)) is None else list(ref),
    }
    if summary["reference"] is not None:
        normalized = [run["human_normalized"] for run in scored]
        summary["human_normalized"] = _spread(normalized)
    threshold = (spec.thresholds or {}).get(game)
    if threshold is not None:
        reached = [
            run["seed"] for run in scored if run.get("reached_at_frames") is not None
        ]  # why: a failed or unfinished seed counts as not reached
        summary["threshold"] = {
            "value": threshold,
            "reached": f"{len(reached)} of {len(runs)}",
            "seeds_reached": reached,
        }
    return summary


def aggregate(spec: SuiteSpec, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and IQM of the human-normalised scores over the games that have a reference
    and a scored seed, with stratified-bootstrap 95% intervals (`gazelle.suite.stats`)."""
    per_game: dict[str, list[float]] = {}
    left_out: dict[str, str] = {}
    for game in spec.games:
        if reference(spec, game) is None:
            left_out[game] = "no reference scores (give them with --scores)"
            continue
        scores = [run["human_normalized"] for run in runs if run["game"] == game and _scored(run)]
        if scores:
            per_game[game] = scores
        else:
            left_out[game] = "no seed finished with an episode"
    found: dict[str, Any] = {"games": list(per_game), "left_out": left_out}
    if not per_game:
        return found
    arrays = [np.asarray(scores) for scores in per_game.values()]
    found["runs"] = sum(len(a) for a in arrays)
    for name, statistic in (("median", stats.median_of_means), ("iqm", stats.iqm)):
        low, high = stats.stratified_bootstrap_ci(
            arrays, statistic, reps=BOOTSTRAP_REPS, seed=BOOTSTRAP_SEED
        )
        found[name] = {"value": float(statistic(arrays)), "ci95": [low, high]}
    found["bootstrap"] = {
        "method": "stratified, percentile interval",
        "reps": BOOTSTRAP_REPS,
        "seed": BOOTSTRAP_SEED,
    }
    return found


def _figure(spec: SuiteSpec, runs: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(file name, None) of the curves figure, or (None, why not)."""
    from gazelle.plot import PlotError, plot

    logdirs = [run["logdir"] for run in runs if (Path(run["logdir"]) / "progress.jsonl").exists()]
    if not logdirs:
        return None, "no run has a progress.jsonl"
    try:
        plot(logdirs, spec.out / "curves.png")
    except PlotError as err:
        return None, str(err)
    return "curves.png", None


def build_report(spec: SuiteSpec, command: str, figure: bool = True) -> dict[str, Any]:
    """The whole report as `report.json` holds it."""
    runs = [run_result(spec, pair) for pair in pairs(spec)]
    name, why = _figure(spec, runs) if figure else (None, "not drawn")
    return {
        "suite": spec.name,
        "games": list(spec.games),
        "seeds": list(spec.seeds),
        "budget": {"frames": spec.frames} if spec.frames is not None else {"minutes": spec.minutes},
        "suite_command": command,
        "per_game": {
            game: game_summary(spec, game, [r for r in runs if r["game"] == game])
            for game in spec.games
        },
        "aggregate": aggregate(spec, runs),
        "figure": name,
        "figure_missing": why,
        "runs": runs,
    }


def _number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def markdown(report: dict[str, Any]) -> str:
    """report.md: the budget, the suite's aggregate, a table per game and one per run."""
    budget = report["budget"]
    said = (
        f"{budget['frames']:,} frames" if "frames" in budget else f"{budget['minutes']:g} minutes"
    )
    lines = [
        f"# Suite `{report['suite']}`: {len(report['games'])} games x "
        f"{len(report['seeds'])} seeds, {said} per run",
        "",
        f"Command: `{report['suite_command']}`",
        "",
        "## Suite (human-normalised score, %)",
        "",
    ]
    agg = report["aggregate"]
    if "median" in agg:
        for name, label in (("median", "Median"), ("iqm", "IQM")):
            low, high = agg[name]["ci95"]
            lines.append(
                f"- {label}: **{_number(agg[name]['value'])}** "
                f"(95% CI {_number(low)} to {_number(high)})"
            )
        lines.append(
            f"- over {len(agg['games'])} games and {agg['runs']} runs; stratified bootstrap "
            f"(Agarwal et al. 2021), {agg['bootstrap']['reps']:,} replicates"
        )
    else:
        lines.append("- no aggregate: no game has both reference scores and a scored seed")
    lines += [f"- left out: {game}: {why}" for game, why in agg["left_out"].items()]
    lines += [
        "",
        "## Per game",
        "",
        "| game | seeds scored | final return: mean ± std [min, max] | human-normalised % "
        "| threshold: seeds reached | frames/s | not scored |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for game, summary in report["per_game"].items():
        ret = summary["final_return"]
        spread = (
            f"{_number(ret['mean'], 2)} ± {_number(ret['std'], 2)} "
            f"[{_number(ret['min'], 2)}, {_number(ret['max'], 2)}]"
        )
        norm = summary.get("human_normalized")
        norm_text = "no reference" if norm is None else _number(norm["mean"])
        threshold = summary.get("threshold")
        reached = (
            ""
            if threshold is None
            else (f"{threshold['value']:g}: {threshold['reached']} {threshold['seeds_reached']}")
        )
        missing = ", ".join(f"seed {s}: {why}" for s, why in summary["not_scored"].items())
        lines.append(
            f"| {_cell(game)} | {summary['seeds_scored']} | {spread} | {norm_text} | "
            f"{_cell(reached)} | {_number(summary['fps'], 0)} | {_cell(missing)} |"
        )
    lines += [
        "",
        "## Runs",
        "",
        "| game | seed | status | final return | frames | frames/s | command |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in report["runs"]:
        status = run["status"] + (f" ({run['error']})" if run.get("error") else "")
        lines.append(
            f"| {_cell(run['game'])} | {run['seed']} | {_cell(status)} | "
            f"{_number(run['final_return'], 2)} | {run['frames']:,} | {_number(run['fps'], 0)} "
            f"| `{_cell(run['command'])}` |"
        )
    figure = report["figure"]
    lines += ["", f"![curves]({figure})" if figure else f"No figure: {report['figure_missing']}"]
    return "\n".join(lines) + "\n"


def write_report(spec: SuiteSpec, command: str, figure: bool = True) -> dict[str, Any]:
    """Write report.json and report.md (and curves.png) under the suite's directory."""
    report = build_report(spec, command, figure)
    for name, text in (
        ("report.json", json.dumps(report, indent=1) + "\n"),
        ("report.md", markdown(report)),
    ):
        tmp = spec.out / f"{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, spec.out / name)  # why: a reader never sees half a report
    return report
