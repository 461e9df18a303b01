"""Processes as /proc shows them, for the tests that check what a run leaves running."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """True while `pid` runs (a zombie, killed and not yet reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
