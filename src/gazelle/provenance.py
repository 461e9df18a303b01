"""Where a run came from: the versions of gazelle and of the libraries that shape its
results, the git commit of the code when it runs from a checkout, the machine and the
command. Written next to the config (`provenance.json`) and shown by `gazelle test`."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

PROVENANCE_FILE = "provenance.json"
PACKAGES = ("gazelle", "torch", "gymnasium", "ale-py", "numpy", "minigrid")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the checkout this code runs from (with `+dirty` when it has local
    changes), or None when it is not a git checkout (an installed wheel)."""
    where = path or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance() -> dict[str, Any]:
    return {
        "versions": {package: _version(package) for package in PACKAGES},
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": sys.argv,
    }


def write_provenance(logdir: Path) -> dict[str, Any]:
    info = provenance()
    (logdir / PROVENANCE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def read_provenance(logdir: Path) -> dict[str, Any] | None:
    path = logdir / PROVENANCE_FILE
    return json.loads(path.read_text()) if path.exists() else None
