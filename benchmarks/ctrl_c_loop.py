"""Ctrl-C never hangs: start a small training, send SIGINT to its process group once it
trains, and check it exits cleanly (code 0, a checkpoint, no process left), N times in a
row, under load (by default one busy process per core runs alongside).

    python benchmarks/ctrl_c_loop.py --runs 50

Prints one line per run and a JSON summary; exits 1 if any run hung or left a process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path


def _busy(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy processes")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_reliability import ctrl_c_once

    loaders = [
        multiprocessing.Process(target=_busy, args=(time.monotonic() + 3600,), daemon=True)
        for _ in range(args.load)
    ]
    for p in loaders:
        p.start()
    results = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="gazelle-ctrl-c-") as logdir:
                took, code, left = ctrl_c_once(logdir)
                ok = code == 0 and not left and (Path(logdir) / "checkpoint.pt").exists()
            results.append({"run": i, "seconds": round(took, 2), "code": code, "left": left})
            verdict = "ok" if ok else "FAIL"
            print(f"run {i:2d}: exit {code} after {took:5.2f} s, left {left} {verdict}", flush=True)
    finally:
        for p in loaders:
            p.terminate()
    failed = [r for r in results if r["code"] != 0 or r["left"]]
    worst = max(r["seconds"] for r in results)
    print(json.dumps({"runs": len(results), "failed": len(failed), "worst_seconds": worst}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
