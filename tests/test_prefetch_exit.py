"""The learner's prefetch thread is gone when `Prefetcher.close()` returns.

A thread left inside a torch op at interpreter exit is ended by a forced unwind through
torch's noexcept frames: the process aborts ("terminate called without an active
exception", exit -6) after a run that finished well. Seen once in CI on `gazelle train
--quiet` (tests/test_console.py) before close() joined the thread.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import torch
    from gazelle.runtime.learner import Prefetcher

    def source(should_stop):
        x = torch.randn(1500, 1500)
        while True:  # mid-op (GIL released) whenever it is told to stop
            for _ in range(3):
                y = x @ x.T
            yield {"x": y[:2]}
            if should_stop():
                return

    prefetcher = Prefetcher(source, torch.device("cpu"))
    prefetcher.get(timeout=30)
    print("closed", prefetcher.close())
    """
)


def test_a_process_exits_cleanly_right_after_closing_a_busy_prefetcher() -> None:
    for _ in range(2):  # without the join it aborts on every try; twice rules out luck
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "closed True" in proc.stdout
