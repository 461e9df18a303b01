"""Memory soak: run `gazelle train` for a fixed time and report the resident memory of the
learner and of each actor every interval; after the warm-up it must be flat.

    python benchmarks/soak.py --minutes 30 -- --env PongNoFrameskip-v4 --logdir runs/soak

Everything after `--` goes to `gazelle train` (`--max-seconds` is added). Prints one row per
sample (minutes, learner MiB, each actor's MiB), then one JSON line with the samples, the
growth of each process between the end of the warm-up and the end, and `flat` (every growth
under `--tolerance-mib`). Actors restarted during the run are followed by their new pid.
Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def rss_mib(pid: int) -> float | None:
    """Resident set size of `pid` in MiB, or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def actor_pids(parent: int) -> list[int]:
    """The parent's children that are actors (spawned multiprocessing children that are not
    its resource tracker), in pid order."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines()[1:]:
        pid, ppid, args = line.split(None, 2)
        if ppid == str(parent) and "spawn_main" in args:
            pids.append(int(pid))
    return sorted(pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval-s", type=float, default=60.0)
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--tolerance-mib", type=float, default=50.0)
    args, train_args = parser.parse_known_args()
    train_args = [a for a in train_args if a != "--"]
    seconds = args.minutes * 60.0
    cmd = ["gazelle", "train", *train_args, "--max-seconds", str(seconds)]
    # The run's own console goes to our stderr, so that a run that fails at once says why.
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=subprocess.STDOUT)
    start = time.monotonic()
    samples: list[dict[str, object]] = []
    print(f"soak: {' '.join(cmd)}", flush=True)
    try:
        while proc.poll() is None:
            time.sleep(args.interval_s)
            if proc.poll() is not None:
                break
            actors = [rss_mib(pid) for pid in actor_pids(proc.pid)]
            sample = {
                "minutes": round((time.monotonic() - start) / 60.0, 2),
                "learner_mib": round(rss_mib(proc.pid) or 0.0, 1),
                "actors_mib": [round(a, 1) for a in actors if a is not None],
            }
            samples.append(sample)
            print(
                f"{sample['minutes']:6.1f} min  learner {sample['learner_mib']:8.1f} MiB  "
                f"actors {sample['actors_mib']}",
                flush=True,
            )
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
    after = [s for s in samples if float(s["minutes"]) >= args.warmup_minutes]  # type: ignore[arg-type]
    growth: dict[str, float] = {}
    if len(after) >= 2:
        first, last = after[0], after[-1]
        growth["learner"] = float(last["learner_mib"]) - float(first["learner_mib"])  # type: ignore[arg-type]
        for i, (a, b) in enumerate(zip(first["actors_mib"], last["actors_mib"])):  # type: ignore[call-overload]
            growth[f"actor_{i}"] = round(b - a, 1)
    flat = bool(growth) and all(abs(g) < args.tolerance_mib for g in growth.values())
    report = {"samples": samples, "growth_mib": growth, "flat": flat, "rc": proc.returncode}
    print(json.dumps(report))
    sys.exit(0 if proc.returncode in (0, None) else proc.returncode)


if __name__ == "__main__":
    main()
