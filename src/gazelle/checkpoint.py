"""Checkpoints: atomic save, safe load (``weights_only=True``), and RNG state.

``save`` writes to a temporary file in the target's directory, flushes and fsyncs it, then
``os.replace``-s it onto the target: a crash at any moment leaves either the old checkpoint
or the new one in place, never a torn file. With ``keep_previous=True`` (the default) the
checkpoint being replaced stays available as ``<path>.prev`` (a guard against a checkpoint
that saved fine but holds a bad state, e.g. after a divergence); it costs one more file.

``load`` uses ``torch.load(weights_only=True)``: only tensors, containers of them and plain
Python scalars/strings load, never arbitrary pickled objects. ``rng_state`` captures the
Python, NumPy (global) and torch RNGs in that form, and ``set_rng_state`` restores them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "load",
    "load_or_previous",
    "previous_path",
    "put_previous_back",
    "rng_state",
    "save",
    "set_rng_state",
    "write_text",
]


class CheckpointError(RuntimeError):
    """A checkpoint could not be read (corrupt, truncated or holding unsafe objects)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist."""


def previous_path(path: str | Path) -> Path:
    """Where ``save(path, ..., keep_previous=True)`` keeps the checkpoint it replaced."""
    path = Path(path)
    return path.with_name(path.name + ".prev")


def _copy_synced(source: Path, target: Path) -> None:
    """Copy `source` to `target` and fsync the copy (before any rename makes it count)."""
    shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where dirs can't be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save(path: str | Path, state: Mapping[str, Any], *, keep_previous: bool = True) -> None:
    """Atomically write ``state`` (tensors, containers, plain scalars) to ``path``.

    Args:
        path: the checkpoint file; its directory is created if missing.
        state: e.g. ``{"model": model.state_dict(), "optimizer": opt.state_dict(),
            "frames": 123, "rng": rng_state()}``. Keep it to what ``weights_only`` loads.
        keep_previous: first move an existing checkpoint to ``<path>.prev``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(dict(state), f)
            f.flush()
            os.fsync(f.fileno())  # why: the data must be on disk before the rename is
        if keep_previous and path.exists():
            # why: a hard link keeps `path` in place until the final replace, so there is no
            # moment without a good checkpoint at `path`.
            prev_tmp = path.with_name(f".{path.name}.prev.tmp")
            with contextlib.suppress(FileNotFoundError):
                prev_tmp.unlink()
            try:
                os.link(path, prev_tmp)  # why: the same inode, on disk since its own save
            except OSError:  # no hard links on this filesystem: copy instead
                _copy_synced(path, prev_tmp)
            os.replace(prev_tmp, previous_path(path))
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(err, OSError) and err.errno is not None and err.filename is None:
            err.filename = str(path)  # why: a failed write (ENOSPC) names no file otherwise
        raise
    _fsync_dir(path.parent)
    _remove_stale_temps(path)


def write_text(path: str | Path, text: str) -> None:
    """Write a small text file (a run's config.json) as `save` writes a checkpoint: a
    temporary file, fsynced, renamed over `path`, the directory fsynced."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


#: A temporary file of `save` untouched this long belongs to a save that was killed.
STALE_TEMP_S = 60.0


def _remove_stale_temps(path: Path) -> None:
    """Delete the temporary files that a killed `save` (SIGKILL, power loss) left behind.

    why: only files untouched for `STALE_TEMP_S` go, so a save running at this moment in
    another process (its file is being written) is left alone.
    """
    now = time.time()
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*tmp"):
        with contextlib.suppress(OSError):
            if now - leftover.stat().st_mtime > STALE_TEMP_S:
                leftover.unlink()


def load(path: str | Path, map_location: str | torch.device | None = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by ``save`` (``weights_only=True``).

    Raises:
        CheckpointNotFoundError: no file at ``path`` (also a ``FileNotFoundError``).
        CheckpointError: the file is truncated, corrupt, or holds objects other than
            tensors, containers and plain scalars; the message names the path.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        # why: torch's message runs over many lines (with advice about weights_only); its
        # first line says what failed, and the error must stay one line.
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"cannot load checkpoint {path} (corrupt, truncated, or not a weights-only "
            f"checkpoint): {type(exc).__name__}: {first}"
        ) from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, not a dict")
    return state


def load_or_previous(
    path: str | Path, map_location: str | torch.device | None = "cpu"
) -> tuple[dict[str, Any], Path, CheckpointError | None]:
    """``load(path)``, or, when that file is unreadable (corrupt, truncated), the copy that
    ``save`` kept before it (``<path>.prev``). Returns the state, the file it came from and
    why ``path`` did not load (None when it did).

    Raises:
        CheckpointNotFoundError: no file at ``path``.
        CheckpointError: neither file loads; the message names both and why.
    """
    path = Path(path)
    try:
        return load(path, map_location), path, None
    except CheckpointNotFoundError:
        raise
    except CheckpointError as err:
        prev = previous_path(path)
        try:
            return load(prev, map_location), prev, err
        except CheckpointError as prev_err:
            raise CheckpointError(f"{err}; and its previous copy: {prev_err}") from prev_err


def put_previous_back(path: str | Path) -> Path:
    """Keep an unreadable ``path`` as ``<path>.corrupt`` and put a copy of ``<path>.prev``
    in its place; returns where the unreadable file went.

    why: otherwise the next ``save`` would move the unreadable file to ``<path>.prev`` and
    the run would have no readable previous checkpoint until the save after it.
    """
    path = Path(path)
    corrupt = path.with_name(path.name + ".corrupt")
    _copy_synced(path, corrupt)
    tmp = path.with_name(f".{path.name}.restore.tmp")
    _copy_synced(previous_path(path), tmp)
    os.replace(tmp, path)  # why: atomic, as every write of `path`
    _fsync_dir(path.parent)  # why: the rename too must reach the disk
    return corrupt


def rng_state() -> dict[str, Any]:
    """The Python, NumPy (global) and torch CPU/CUDA RNG states, loadable by ``weights_only``.

    Returns:
        ``{"python": {...}, "numpy": {...}, "torch": ByteTensor, "cuda": [ByteTensor]}``
        holding only tensors, lists, ints, floats, strings and None.
    """
    py_version, py_internal, py_gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)  # noqa: NPY002
    return {
        "python": {
            "version": int(py_version),
            # 625 uint32 words: int64 holds them exactly.
            "state": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
        "numpy": {
            "kind": str(np_kind),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the RNGs from ``rng_state()``; the next draws equal those after the capture.

    CUDA states are restored only when CUDA is available with the same number of devices
    (a checkpoint taken on a GPU machine still resumes on a CPU one).
    """
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state(  # noqa: NPY002 (the global RNG is what we restore)
        (
            npy["kind"],
            npy["keys"].numpy().astype(np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
