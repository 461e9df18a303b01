"""`gazelle` with a linear learning-rate warmup over the first GZ_WARMUP frames (a probe of
docs/results.md, "The background at 0"; run as `python gz_warm.py train ...`:
the schedule's rate times min(1, frames / GZ_WARMUP), floored at 1% of it)."""

import os
import sys

from gazelle.runtime import schedule as optim

WARMUP = int(os.environ.get("GZ_WARMUP", "1000000"))
_decay = optim.LinearDecay.__call__


def _warm(self, frames):
    return _decay(self, frames) * min(1.0, max(frames / WARMUP, 0.01))


optim.LinearDecay.__call__ = _warm

if __name__ == "__main__":
    from gazelle.cli import main

    sys.exit(main())
