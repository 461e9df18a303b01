"""Learning curves from ``progress.jsonl`` files, drawn to a PNG.

Uses matplotlib when it is installed (it is not a dependency); otherwise a small built-in
rasteriser (numpy + zlib) draws the axes, tick labels and one coloured curve per run, so
``gazelle plot`` always works. The built-in PNG numbers the runs 1, 2, ... in its legend and
stores the run names in its ``tEXt`` metadata (``Legend``), as it has no font for letters.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["PALETTE", "plot", "read_progress"]

Series = tuple[np.ndarray, np.ndarray]  # (xs, ys), float64 [N] each

#: Curve colours (RGB), run i gets ``PALETTE[i % len(PALETTE)]``.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)

# 3x5 bitmap glyphs for tick labels (rows top to bottom): digits, sign, point, units.
_GLYPHS: dict[str, str] = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    ".": "000000000000010",
    "-": "000000111000000",
    "K": "101101110101101",
    "M": "101111111101101",
    "G": "111100101101111",
    "T": "111010010010010",
}
_SCALE = 2  # glyph pixel size
_MARGINS = (70, 20, 20, 40)  # left, top, right, bottom (pixels)


def read_progress(logdir: str | Path, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """``(xs, ys)`` float64 ``[N]`` from ``logdir/progress.jsonl`` (or that file), sorted by x.

    Rows missing ``x`` or ``y``, with a null, or torn by a crash are skipped.
    """
    path = Path(logdir)
    if path.is_dir():
        path = path / "progress.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no progress file at {path}")
    points: list[tuple[float, float]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        xv, yv = row.get(x), row.get(y)
        numbers = isinstance(xv, (int, float)) and isinstance(yv, (int, float))
        if numbers and math.isfinite(xv) and math.isfinite(yv):
            points.append((float(xv), float(yv)))
    points.sort(key=lambda p: p[0])
    data = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return data[:, 0], data[:, 1]


def plot(
    logdirs: Sequence[str | Path],
    out: str | Path,
    x: str = "frames",
    y: str = "episode_return",
    *,
    labels: Sequence[str] | None = None,
    backend: str = "auto",
    width: int = 800,
    height: int = 500,
) -> Path:
    """Draw ``y`` against ``x`` for each run (one line per logdir) into the PNG ``out``.

    Args:
        logdirs: run directories holding ``progress.jsonl`` (or the files themselves).
        out: the PNG to write (its directory is created).
        x, y: column names of ``progress.jsonl`` (e.g. ``time``, ``losses/total``).
        labels: run names for the legend; default the directory names.
        backend: ``"auto"`` (matplotlib if importable, else built-in), ``"matplotlib"``
            or ``"builtin"``.
        width, height: image size in pixels.

    Returns:
        ``out`` as a Path.
    """
    if backend not in ("auto", "matplotlib", "builtin"):
        raise ValueError(f"backend must be auto, matplotlib or builtin, not {backend!r}")
    if not logdirs:
        raise ValueError("plot needs at least one run directory")
    names = list(labels) if labels is not None else [_run_name(Path(d)) for d in logdirs]
    if len(names) != len(logdirs):
        raise ValueError(f"{len(names)} labels for {len(logdirs)} runs")
    series = [read_progress(d, x, y) for d in logdirs]
    if not any(len(xs) for xs, _ in series):
        raise ValueError(f"no rows with both {x!r} and {y!r} in {[str(d) for d in logdirs]}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if backend != "builtin":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if backend == "matplotlib":
                raise ImportError(
                    "backend='matplotlib' needs matplotlib: pip install matplotlib"
                ) from None
        else:
            _plot_matplotlib(series, names, out, x, y, width, height)
            return out
    _plot_builtin(series, names, out, x, y, width, height)
    return out


def _run_name(path: Path) -> str:
    return path.parent.name if path.is_file() else path.name


def _plot_matplotlib(
    series: list[Series], names: list[str], out: Path, x: str, y: str, width: int, height: int
) -> None:
    # Figure + Agg canvas directly: no pyplot, so no global state and no GUI backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / 100, height / 100), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, ((xs, ys), name) in enumerate(zip(series, names)):
        colour = tuple(c / 255 for c in PALETTE[i % len(PALETTE)])
        ax.plot(xs, ys, color=colour, label=name, linewidth=1.5)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def _nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[np.ndarray, float]:
    """Ticks at multiples of 1, 2 or 5 x 10^k inside ``[lo, hi]``; returns (ticks, step)."""
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return np.arange(first, hi + step * 1e-9, step), step


def _tick_labels(ticks: np.ndarray, step: float) -> list[str]:
    """Labels with one unit suffix (K/M/G/T) per axis, the largest not above the step."""
    scale, suffix = 1.0, ""
    for threshold, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if step >= threshold:
            scale, suffix = threshold, unit
            break
    decimals = min(max(0, -math.floor(math.log10(step / scale) + 1e-9)), 4)
    # why: arange accumulates rounding error; snap near-zero ticks so they print as 0.
    ticks = np.where(np.abs(ticks) < step * 1e-6, 0.0, ticks)
    return ["0" if t == 0 else f"{t / scale:.{decimals}f}{suffix}" for t in ticks]


def _text(canvas: np.ndarray, text: str, col: int, row: int, colour: int = 40) -> None:
    """Stamp ``text`` with its top-left at (row, col); unknown characters become gaps."""
    for ch in text:
        glyph = _GLYPHS.get(ch)
        if glyph is not None:
            bits = np.array([c == "1" for c in glyph]).reshape(5, 3)
            big = np.kron(bits, np.ones((_SCALE, _SCALE), dtype=bool))
            h, w = big.shape
            region = canvas[row : row + h, col : col + w]
            region[big[: region.shape[0], : region.shape[1]]] = colour
        col += 4 * _SCALE


def _text_width(text: str) -> int:
    return len(text) * 4 * _SCALE - _SCALE


def _draw_line(
    canvas: np.ndarray, px: np.ndarray, py: np.ndarray, rgb: tuple[int, ...], box: tuple[int, ...]
) -> None:
    """Draw the polyline through pixel coordinates ``px, py`` (float ``[N]``), 2 px thick."""
    if len(px) == 1:
        xs, ys = px, py
    else:
        dx, dy = np.diff(px), np.diff(py)
        counts = np.ceil(np.maximum(np.abs(dx), np.abs(dy))).astype(np.int64) + 1
        segment = np.repeat(np.arange(len(dx)), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        t = (np.arange(counts.sum()) - starts) / np.maximum(np.repeat(counts - 1, counts), 1)
        xs = px[segment] + t * dx[segment]
        ys = py[segment] + t * dy[segment]
    left, top, right, bottom = box
    cols, rows = np.rint(xs).astype(np.int64), np.rint(ys).astype(np.int64)
    for dc, dr in ((0, 0), (1, 0), (0, 1), (1, 1)):
        c, r = cols + dc, rows + dr
        inside = (c >= left) & (c <= right) & (r >= top) & (r <= bottom)
        canvas[r[inside], c[inside]] = rgb


def _plot_builtin(
    series: list[Series], names: list[str], out: Path, x: str, y: str, width: int, height: int
) -> None:
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    left, top, right, bottom = _MARGINS[0], _MARGINS[1], width - _MARGINS[2], height - _MARGINS[3]
    all_x = np.concatenate([xs for xs, _ in series])
    all_y = np.concatenate([ys for _, ys in series])
    x_lo, x_hi = _padded_range(all_x, pad=0.0)
    y_lo, y_hi = _padded_range(all_y, pad=0.05)

    def to_col(v: np.ndarray) -> np.ndarray:
        return left + (v - x_lo) / (x_hi - x_lo) * (right - left)

    def to_row(v: np.ndarray) -> np.ndarray:
        # why: image rows grow downwards, so larger y maps to a smaller row.
        return bottom - (v - y_lo) / (y_hi - y_lo) * (bottom - top)

    x_ticks, x_step = _nice_ticks(x_lo, x_hi)
    for tick, label in zip(x_ticks, _tick_labels(x_ticks, x_step)):
        col = round(float(to_col(np.array(tick))))
        canvas[top:bottom, col] = 225
        _text(canvas, label, col - _text_width(label) // 2, bottom + 8)
    y_ticks, y_step = _nice_ticks(y_lo, y_hi)
    for tick, label in zip(y_ticks, _tick_labels(y_ticks, y_step)):
        row = round(float(to_row(np.array(tick))))
        canvas[row, left:right] = 225
        _text(canvas, label, left - 8 - _text_width(label), row - 5 * _SCALE // 2)
    canvas[top : bottom + 1, [left, right]] = 0  # frame
    canvas[[top, bottom], left : right + 1] = 0
    inner = (left + 1, top + 1, right - 1, bottom - 1)
    for i, (xs, ys) in enumerate(series):
        if len(xs):
            _draw_line(canvas, to_col(xs), to_row(ys), PALETTE[i % len(PALETTE)], inner)
    for i in range(len(series)):  # legend: run number and a colour bar, top left
        row = top + 8 + i * 7 * _SCALE
        _text(canvas, str(i + 1), left + 8, row)
        canvas[row + 3 : row + 7, left + 30 : left + 55] = PALETTE[i % len(PALETTE)]
    legend = "; ".join(f"{i + 1}={name}" for i, name in enumerate(names))
    _write_png(out, canvas, {"Title": f"{y} vs {x}", "Legend": legend, "Software": "gazelle"})


def _padded_range(values: np.ndarray, pad: float) -> tuple[float, float]:
    """``[min, max]`` of ``values`` widened by ``pad`` of its span (or +-1 if flat)."""
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        return lo - 1.0, hi + 1.0
    span = hi - lo
    return lo - pad * span, hi + pad * span


def _write_png(path: Path, rgb: np.ndarray, text: dict[str, str]) -> None:
    """Write an 8-bit RGB PNG of ``rgb`` uint8 ``[H, W, 3]`` with ``tEXt`` entries."""
    height, width, _ = rgb.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    # Each scanline starts with its filter type (0: none).
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = [chunk(b"IHDR", header)]
    for key, value in text.items():
        entry = key.encode("latin-1") + b"\0" + value.encode("latin-1", "replace")
        body.append(chunk(b"tEXt", entry))
    body.append(chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)))
    body.append(chunk(b"IEND", b""))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(body))
