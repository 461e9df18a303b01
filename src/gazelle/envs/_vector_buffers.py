"""Preallocated arrays of an env batch, in private memory or in one shared-memory segment.

`SerialEnvs` keeps them in ordinary memory; `VectorEnv` lays them out in one
`multiprocessing.shared_memory` segment that the parent and every worker map, so a step
moves no observation through a pipe. The worker writes the rows of its envs; the parent
reads them after the worker has answered (see `gazelle.envs._vector_worker`).

This module imports no torch: spawned workers import it.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

#: Prefix of the shared-memory segment names (``/dev/shm/<name>`` on Linux). The name also
#: carries the creating process id, so a leaked segment can be traced to its owner.
SHM_PREFIX = "gzvec_"

#: Alignment of each array in a segment (a cache line).
_ALIGN = 64

#: Per-env scalar fields: (name, dtype).
_SCALARS: tuple[tuple[str, type], ...] = (
    ("action", np.int64),
    ("reward", np.float32),
    ("terminated", np.bool_),
    ("truncated", np.bool_),
    ("game_over", np.bool_),
    ("episode_return", np.float32),
    ("episode_length", np.int64),
)


@dataclass
class BatchArrays:
    """The arrays of a batch of `N` envs; row `i` belongs to env `i`.

    Attributes:
        action: int64 `[N]`, written by the parent before a step.
        reward: float32 `[N]`.
        terminated, truncated, game_over: bool `[N]`.
        episode_return: float32 `[N]`, game total so far (see `gazelle.envs.vector`).
        episode_length: int64 `[N]`.
        frame: `[N, *frame_shape]`, the current observation of each env.
        final_frame: `[N, *frame_shape]`, the last observation of an episode that ended at
            this step (meaningful only in the rows of envs that ended).
    """

    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    game_over: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    frame: np.ndarray
    final_frame: np.ndarray


def _layout(
    num_envs: int, frame_shape: tuple[int, ...], frame_dtype: np.dtype
) -> tuple[list[tuple[str, np.dtype, tuple[int, ...], int]], int]:
    """Byte offsets of every array: ([(name, dtype, shape, offset)], total bytes)."""
    entries: list[tuple[str, np.dtype, tuple[int, ...], int]] = []
    offset = 0
    fields: list[tuple[str, np.dtype, tuple[int, ...]]]
    fields = [(name, np.dtype(dtype), (num_envs,)) for name, dtype in _SCALARS]
    fields += [(name, frame_dtype, (num_envs, *frame_shape)) for name in ("frame", "final_frame")]
    for name, dtype, shape in fields:
        entries.append((name, dtype, shape, offset))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset += -(-nbytes // _ALIGN) * _ALIGN  # round up to the alignment
    return entries, max(offset, _ALIGN)


def batch_nbytes(num_envs: int, frame_shape: tuple[int, ...], frame_dtype: np.dtype) -> int:
    """Size in bytes of the arrays of a batch (what a shared segment must hold)."""
    return _layout(num_envs, frame_shape, np.dtype(frame_dtype))[1]


def batch_arrays(
    num_envs: int,
    frame_shape: tuple[int, ...],
    frame_dtype: np.dtype,
    buffer: memoryview | None = None,
) -> BatchArrays:
    """Views of the batch arrays over `buffer`, or fresh private arrays when it is None."""
    entries, total = _layout(num_envs, frame_shape, np.dtype(frame_dtype))
    if buffer is None:
        buffer = memoryview(bytearray(total))
    arrays = {
        name: np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)
        for name, dtype, shape, offset in entries
    }
    return BatchArrays(**arrays)


class Segment(shared_memory.SharedMemory):
    """A shared-memory segment whose `close()` tolerates numpy views that outlive it.

    `VectorEnv` hands out read-only views over the segment (the batched frames). When a
    caller still holds one at `close()`, the mapping cannot be released; it is then freed
    with the last view, instead of raising `BufferError` from `close()` or `__del__`.
    """

    _fd: int

    def close(self) -> None:
        try:
            super().close()
        except BufferError:
            # why: a view still exports the buffer; the memoryview keeps the mapping alive
            # until it dies. Only the file descriptor is released now.
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def create_segment(nbytes: int) -> Segment:
    """Create a new segment named `gzvec_<pid>_<random>` of at least `nbytes` bytes."""
    for _ in range(8):
        name = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        try:
            return Segment(name=name, create=True, size=nbytes)
        except FileExistsError:
            continue
    raise RuntimeError("could not find a free shared-memory segment name")
