"""The memory check's verdicts on tasks that need memory and tasks that do not.

    python benchmarks/memory_check.py --out /work/runs/memcheck --seeds 1 2 3 \\
        --envs CartPole-v1 Acrobot-v1 MountainCar-v0 gazelle/Memory-v0 ...

Runs `gazelle train --env ENV --seed S` at the defaults (IMPALA, a memoryless agent on every
vector task; `--set algo=appo` for APPO, whose loop is IMPALA's) for as many frames as the
check looks at (`gazelle.runtime.memory_check.WINDOW` batches), and prints per env and seed
whether the run said the task needs memory, with the last `memory/gain_*` of its progress
rows; each run's `memory_trace.jsonl` holds the check's gains and shares at every batch after
its warm-up, to the end of its window (the run's check stops at a verdict; this one goes
on). Settings such as the memory task's `--unroll-length` go through `--set NAME=VALUE` (flat
config names; values read as JSON, else as text).
Results: docs/notes/lstm.md ("Memory at defaults").
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

from gazelle.algorithms import train
from gazelle.algorithms.impala import loop
from gazelle.config import Config
from gazelle.runtime.memory_check import TARGETS, WINDOW, MemoryCheck


class TracingCheck(MemoryCheck):
    """The run's check, which also keeps every batch's gains and shares (`trace`) and looks
    at its whole window after a verdict too (the run's own check stops there)."""

    traces: ClassVar[list[list[dict[str, Any]]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trace: list[dict[str, Any]] = []
        TracingCheck.traces.append(self.trace)

    @property
    def active(self) -> bool:
        return self.batches < self.window

    def _observe(self, batch: dict[str, Any]) -> dict[str, float]:
        metrics = super()._observe(batch)
        if self.batches >= self.warmup:
            self.trace.append(
                {"batch": self.batches, "gains": self.gains(), "shares": self.shares(),
                 "warned": self.warned}
            )  # fmt: skip
        return metrics


def one_run(env: str, seed: int, out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    logdir = out / f"{env.replace('/', '_')}-s{seed}"
    # why: the check looks at WINDOW batches; the run needs no more frames than those.
    config = Config.of(env=env, seed=seed, logdir=str(logdir), **settings)
    printed = io.StringIO()
    TracingCheck.traces.clear()
    # why: the loop's own check, traced (the loop imported the class by name).
    with mock.patch.object(loop, "MemoryCheck", TracingCheck), contextlib.redirect_stdout(printed):
        result = train(config.replace(total_frames=_frames(config)))
    with (logdir / "memory_trace.jsonl").open("w") as f:
        for row in (TracingCheck.traces or [[]])[0]:
            f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]
    last: dict[str, Any] = next((r for r in reversed(rows) if "memory/gain_reward" in r), {})
    return {
        "env": env,
        "seed": seed,
        "frames": result.frames,
        "said_memory": "seems to need memory" in printed.getvalue(),
        **{t: last.get(f"memory/gain_{t}") for t in TARGETS},
    }


def _frames(config: Config) -> int:
    """Frames of WINDOW batches at the run's resolved batch and unroll sizes."""
    from gazelle.algorithms.common import prepare

    resolved, _, _ = prepare(config)
    batch = int(resolved.get("batch_size"))
    unroll = int(resolved.get("unroll_length"))
    return (WINDOW + 10) * batch * unroll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--envs", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    settings: dict[str, Any] = {}
    for pair in args.set:
        name, _, text = pair.partition("=")
        try:
            settings[name] = json.loads(text)
        except json.JSONDecodeError:
            settings[name] = text
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| env | seed | frames | says memory | gain reward | gain end | gain next obs |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for env in args.envs:
        for seed in args.seeds:
            row = one_run(env, seed, out, settings)
            cells = [f"{row[t]:.3f}" if row[t] is not None else "-" for t in TARGETS]
            print(
                f"| {env} | {seed} | {row['frames']} | {'yes' if row['said_memory'] else 'no'} "
                f"| " + " | ".join(cells) + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
