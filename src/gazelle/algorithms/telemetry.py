"""The actors' telemetry, apart from the data: what `Fleet.poll()` returns goes to the logs.

Actors report one "unroll" event per unroll (episodes that ended, seconds per step in each
stage, action counts) and fault events (restarts, crashes, env errors). `Telemetry` turns
them into logged episodes, per-level episode and frame counts and episode statistics
(`level_metrics`), `timing/actor_*` means and the action histogram, and prints the faults;
none of it depends on what happened to the unroll itself (used, dropped as stale).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from gazelle.logging import RETURN_WINDOW, RunLogger, Timings
from gazelle.runtime.interfaces import ACTOR_STAGES


class Telemetry:
    """Consumes fleet events for one run (`levels`: level names by level id)."""

    def __init__(self, logger: RunLogger, timings: Timings, levels: list[str], frame_scale: int):
        """`frame_scale`: env frames per agent step (episode lengths come in agent steps)."""
        self.logger, self.timings, self.levels = logger, timings, levels
        self.frame_scale = frame_scale
        self.episodes = 0
        self.action_counts: np.ndarray | None = None
        self.restarts = 0
        self.env_errors = 0
        self.hung = 0
        #: Games ended per level since this run (or its resume) started.
        self.level_episodes: collections.Counter[str] = collections.Counter()
        #: Env frames acted per level since this run (or its resume) started.
        self.level_frames: collections.Counter[str] = collections.Counter()
        #: level -> statistic -> its values in the last `RETURN_WINDOW` games.
        self._stats: dict[str, dict[str, collections.deque[float]]] = {}

    def level_metrics(self) -> dict[str, float]:
        """`episodes/<level>` (games ended since the start or resume), `frames/<level>`
        (env frames acted on it since then: a multi-task run's share of each level, stale
        unrolls included) and, for envs that report episode statistics (ViZDoom's kills,
        health, ...), `episode_<name>/<level>`: the mean over the level's last
        `RETURN_WINDOW` games."""
        metrics = {f"episodes/{level}": float(n) for level, n in self.level_episodes.items()}
        metrics.update({f"frames/{level}": float(n) for level, n in self.level_frames.items()})
        for level, stats in self._stats.items():
            for name, window in stats.items():
                metrics[f"episode_{name}/{level}"] = float(np.mean(window))
        return metrics

    def scores(self) -> dict[str, float]:
        """Once every level has returns: a multi-task run's summary, the mean over its
        distinct levels of their recent mean returns (`scores/mean_level_return`), and the
        human-normalised scores where every level is in a score table (Atari / DMLab-30);
        {} before."""
        from gazelle.envs import scores

        # why: a level named twice in --env (more actors on it) is one level here.
        levels = list(dict.fromkeys(self.levels))
        logged = self.logger.level_returns()
        if not all(logged.get(level) for level in levels):
            return {}
        returns = {level: logged[level] for level in levels}
        summary: dict[str, float] = {}
        if len(levels) > 1:
            summary["scores/mean_level_return"] = scores.mean_level_return(returns)
        try:
            no_cap = scores.compute_human_normalized_score(returns, per_level_cap=None)
            cap = scores.compute_human_normalized_score(returns, per_level_cap=100)
        except (KeyError, ValueError):
            return summary
        return {
            **summary,
            "scores/human_normalized_no_cap": no_cap,
            "scores/human_normalized_cap_100": cap,
        }

    def consume(self, events: list[dict[str, Any]], frames: int) -> None:
        """Log each event at the learner's current `frames`."""
        for event in events:
            kind = event.get("type")
            if kind == "unroll":
                self._unroll(event, frames)
            else:
                self._fault(event)

    def _unroll(self, event: dict[str, Any], frames: int) -> None:
        level = self.levels[int(event["level_id"])]
        for episode_return, length, *more in event["episodes"]:
            self.logger.episode(
                level, float(episode_return), int(length) * self.frame_scale, frames
            )
            self.episodes += 1
            self.level_episodes[level] += 1
            for name, value in (more[0] if more else {}).items():
                windows = self._stats.setdefault(level, {})
                window = windows.setdefault(name, collections.deque(maxlen=RETURN_WINDOW))
                window.append(float(value))
        if "timing" not in event:
            # why: the rest of an unroll too big for one message (the local backend splits
            # its episodes; the timings and counts came once, with the first part).
            return
        for stage, seconds in zip(ACTOR_STAGES, event["timing"]):
            self.timings.add(f"actor_{stage}_per_step", seconds)
        counts = np.asarray(event["action_counts"], dtype=np.int64)
        # why: an event without "steps" (an older sender) has one count per action taken.
        steps = int(event.get("steps", counts.sum()))
        self.level_frames[level] += steps * self.frame_scale
        if not len(counts):
            return
        if self.action_counts is None or len(self.action_counts) != len(counts):
            self.action_counts = counts
        else:
            self.action_counts += counts

    def take_action_counts(self) -> np.ndarray | None:
        """Actions taken since the last call, by index (None if none were reported)."""
        counts, self.action_counts = self.action_counts, None
        return counts

    def _fault(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "actor_hung":
            self.hung += 1
            print(
                f"\ngazelle: actor {event['actor']} gave no sign of life for "
                f"{event['silent_s']:.0f} s (--actor-timeout-s): killed; it is replaced"
            )
        elif kind == "actor_restart":
            self.restarts += 1
            # why: a local process has an exit code; a Ray actor has a reason instead.
            how = event.get("reason") or f"exit code {event.get('exitcode')}"
            wait = f" in {event['backoff_s']:.0f} s" if event.get("backoff_s") else ""
            print(
                f"\ngazelle: actor {event['actor']} died ({how}); restarted{wait}, "
                f"{event.get('dropped_slots', 0)} half-written unroll(s) dropped"
            )
        elif kind == "actor_pending":
            print(
                f"\ngazelle: actor {event['actor']} cannot be placed: no node has "
                f"{event['cpus']:g} CPU(s) free (a node left?); it waits, the others train"
            )
        elif kind == "actor_placed":
            print(f"\ngazelle: actor {event['actor']} placed after {event['waited_s']:.0f} s")
        elif kind == "actor_crash":
            print(f"\ngazelle: actor {event['actor']} crashed:\n{event['message']}")
        elif kind == "env_error":
            self.env_errors += 1
            level = event.get("level", "?")
            print(
                f"\ngazelle: actor {event['actor']} env {event['env']} ({level}) failed and was "
                f"reset (step not trained on): {event['message']}"
            )
