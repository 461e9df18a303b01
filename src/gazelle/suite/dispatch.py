"""One pass of a suite: which pairs still need a run, then their runs, one after another on
this machine or as Ray tasks (`gazelle.suite.on_ray`).

A rerun skips `done` pairs, resumes `running` and `interrupted` ones (gazelle's own resume
from the checkpoint in the logdir), and leaves `failed` ones failed unless asked
(`retry_failed`), so a report never turns a crash into a success unseen.
"""

from __future__ import annotations

import time

from gazelle.suite.pairs import Pair, budget_met, pairs, read_status, should_run, write_status
from gazelle.suite.runner import run_pair
from gazelle.suite.spec import SuiteSpec


def run_suite(spec: SuiteSpec) -> dict[str, int]:
    """Run every pair that still needs it (one after another, or as Ray tasks with
    `spec.backend` "ray"); returns the count of pairs per status after this pass
    (`skipped`: finished or failed before, not run now)."""
    spec.out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    todo = pairs(spec)
    runnable: list[tuple[str, Pair]] = []
    for number, pair in enumerate(todo, 1):
        where = f"[{number}/{len(todo)}] {pair.game} seed {pair.seed}"
        if not should_run(spec, pair):
            before = read_status(pair)["status"]
            print(f"gazelle suite: {where}: {before} before, not run again")
            counts["skipped"] = counts.get("skipped", 0) + 1
        elif read_status(pair)["status"] != "not started" and budget_met(spec, pair):
            # why: stopped after its last row reached the budget, before its status said so
            write_status(pair, status="done", error=None)
            print(f"gazelle suite: {where}: done before (budget reached), not run again")
            counts["done"] = counts.get("done", 0) + 1
        else:
            runnable.append((where, pair))
    if spec.backend == "ray":
        from gazelle.suite.on_ray import run_on_ray

        run_on_ray(spec, runnable, counts)
        return counts
    for where, pair in runnable:
        print(f"gazelle suite: {where}: running (console: {pair.log_path})", flush=True)
        started = time.monotonic()
        status = run_pair(spec, pair)
        took = time.monotonic() - started
        extra = f": {read_status(pair).get('error')}" if status == "failed" else ""
        print(f"gazelle suite: {where}: {status} in {took:.0f} s{extra}", flush=True)
        counts[status] = counts.get(status, 0) + 1
    return counts
