"""Fast area-interpolation resizing of grayscale frames in numpy (no OpenCV needed).

Area interpolation averages every source pixel that an output pixel covers, weighted by the
covered fraction (what OpenCV's `INTER_AREA` does when shrinking). It is separable: rows are
combined first, then columns. Shrinking by a factor below 2 per axis means an output pixel
touches at most three source rows (columns), so each axis is combined with a few gathers and
multiply-adds. No matrix product: a multi-threaded BLAS call on a busy machine can be 10x
slower than these elementwise operations.
"""

from __future__ import annotations

import numpy as np


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """Dense area-interpolation weights `[n_out, n_in]`; each row sums to 1."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            weights[i, j] = max(0.0, min(hi, j + 1) - max(lo, j)) / scale
    return weights


def _taps(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sparse form of `weights` `[n_out, n_in]`: source indices and weights `[taps, n_out]`."""
    n_out = weights.shape[0]
    taps = int(np.count_nonzero(weights, axis=1).max())
    index = np.zeros((taps, n_out), np.intp)
    value = np.zeros((taps, n_out), np.float32)
    for i in range(n_out):
        nonzero = np.flatnonzero(weights[i])
        # why: outputs with fewer taps repeat their last source index with weight 0.
        index[:, i] = nonzero[-1]
        index[: len(nonzero), i] = nonzero
        value[: len(nonzero), i] = weights[i, nonzero]
    return index, value


class AreaResize:
    """Resize uint8 `[in_h, in_w]` images to uint8 `[out_h, out_w]` (area interpolation).

    Preallocates its buffers; one instance per env, not thread-safe.
    """

    def __init__(self, in_shape: tuple[int, int], out_shape: tuple[int, int]) -> None:
        (in_h, in_w), (out_h, out_w) = in_shape, out_shape
        if out_h > in_h or out_w > in_w:
            raise ValueError(f"AreaResize only shrinks: {in_shape} -> {out_shape}")
        self._row_index, row_weight = _taps(area_weights(in_h, out_h))
        self._col_index, col_weight = _taps(area_weights(in_w, out_w))
        # why: row weights broadcast along columns `[taps, out_h, 1]`, column weights along
        # rows `[taps, 1, out_w]`.
        self._row_weight = row_weight[:, :, None].copy()
        self._col_weight = col_weight[:, None, :].copy()
        self._acc = np.empty((out_h, in_w), np.float32)
        self._tap = np.empty((out_h, in_w), np.float32)
        self._out = np.empty((out_h, out_w), np.float32)
        self._out_tap = np.empty((out_h, out_w), np.float32)
        self.in_shape, self.out_shape = (in_h, in_w), (out_h, out_w)

    def __call__(self, image: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Resize `image` uint8 `[in_h, in_w]` into `out` uint8 `[out_h, out_w]` (or a new one)."""
        if image.shape != self.in_shape:
            raise ValueError(f"expected an image of shape {self.in_shape}, got {image.shape}")
        np.multiply(image[self._row_index[0]], self._row_weight[0], out=self._acc)
        for k in range(1, len(self._row_index)):
            np.multiply(image[self._row_index[k]], self._row_weight[k], out=self._tap)
            self._acc += self._tap
        np.multiply(self._acc[:, self._col_index[0]], self._col_weight[0], out=self._out)
        for k in range(1, len(self._col_index)):
            np.multiply(self._acc[:, self._col_index[k]], self._col_weight[k], out=self._out_tap)
            self._out += self._out_tap
        # why: +0.5 then truncation rounds to nearest; weights sum to 1 so values stay <= 255.
        self._out += 0.5
        if out is None:
            out = np.empty(self.out_shape, np.uint8)
        np.copyto(out, self._out, casting="unsafe")
        return out
