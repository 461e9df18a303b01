"""plot: progress.jsonl curves to a valid PNG (built-in rasteriser; matplotlib when present)."""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from gazelle.plot import PALETTE, plot, read_progress

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_run(logdir: Path, rows: list[dict[str, object]]) -> Path:
    logdir.mkdir(parents=True)
    lines = [json.dumps(row) for row in rows]
    (logdir / "progress.jsonl").write_text("\n".join(lines) + "\n")
    return logdir


def _read_png(path: Path) -> tuple[np.ndarray, dict[str, str]]:
    """Decode an 8-bit RGB, non-interlaced PNG with filter type 0 rows (what we write)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    pos, idat, text = 8, b"", {}
    width = height = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, colour_type, interlace) == (8, 2, 0)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"tEXt":
            key, value = body.split(b"\0", 1)
            text[key.decode("latin-1")] = value.decode("latin-1")
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * 3)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(height, width, 3), text


def _mask(image: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    """bool ``[H, W]``: pixels of exactly this colour."""
    return (image == np.array(rgb, np.uint8)).all(axis=-1)


def _colour_count(image: np.ndarray, rgb: tuple[int, int, int]) -> int:
    return int(_mask(image, rgb).sum())


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    rising = [
        {"frames": f, "episode_return": f / 1000, "time": f / 50} for f in range(0, 10**6, 10**4)
    ]
    falling = [{"frames": f, "episode_return": -f / 2000} for f in range(0, 5 * 10**5, 10**4)]
    falling.insert(0, {"frames": 0, "episode_return": None})  # before the first episode
    return [_write_run(tmp_path / "rising", rising), _write_run(tmp_path / "falling", falling)]


def test_builtin_png_has_curves_in_distinct_colours(two_runs: list[Path], tmp_path: Path) -> None:
    out = plot(two_runs, tmp_path / "out" / "curve.png", backend="builtin", width=640, height=400)
    image, text = _read_png(out)
    assert image.shape == (400, 640, 3)
    assert _colour_count(image, PALETTE[0]) > 300  # a long diagonal, 2 px thick
    assert _colour_count(image, PALETTE[1]) > 150
    assert _colour_count(image, PALETTE[2]) == 0  # no third run
    assert text["Legend"] == "1=rising; 2=falling"
    assert text["Title"] == "episode_return vs frames"
    # Rising goes from the bottom left (y = 0) to the top right; falling stays below y = 0
    # and ends near the middle (the legend's colour bars sit in the top left corner).
    rising, falling = (_mask(image, PALETTE[i]) for i in (0, 1))
    assert rising[20:80, 560:].any() and not rising[200:, 400:].any()
    assert falling[300:, 250:400].any() and not falling[:, 450:].any()
    # Black frame and dark tick-label pixels are drawn too.
    assert _colour_count(image, (0, 0, 0)) > 1000
    assert _colour_count(image, (40, 40, 40)) > 50


def test_other_columns_and_labels(two_runs: list[Path], tmp_path: Path) -> None:
    out = plot(two_runs[:1], tmp_path / "t.png", x="time", labels=["mine"], backend="builtin")
    image, text = _read_png(out)
    assert image.shape == (500, 800, 3) and text["Legend"] == "1=mine"
    assert _colour_count(image, PALETTE[0]) > 300


def test_auto_backend_writes_a_png_of_the_requested_size(
    two_runs: list[Path], tmp_path: Path
) -> None:
    out = plot(two_runs, tmp_path / "auto.png", width=400, height=300)
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert struct.unpack(">II", data[16:24]) == (400, 300)


def test_matplotlib_backend_without_matplotlib_says_how_to_install(
    two_runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plot(two_runs, tmp_path / "m.png", backend="matplotlib")
    out = plot(two_runs, tmp_path / "a.png")  # auto falls back to the built-in one
    assert _read_png(out)[1]["Software"] == "gazelle"


def test_read_progress_skips_nulls_torn_rows_and_sorts(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "progress.jsonl").write_text(
        '{"frames": 20, "episode_return": 2.0}\n'
        '{"frames": 10, "episode_return": 1.0}\n'
        '{"frames": 30, "episode_return": null}\n'
        '{"frames": 40}\n'
        '{"frames": 50, "episo'
    )
    xs, ys = read_progress(run, "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0] and ys.tolist() == [1.0, 2.0]
    xs, _ = read_progress(run / "progress.jsonl", "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0]


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing"):
        plot([tmp_path / "nothing"], tmp_path / "x.png")
    empty = _write_run(tmp_path / "empty", [{"frames": 0, "episode_return": None}])
    with pytest.raises(ValueError, match="episode_return"):
        plot([empty], tmp_path / "x.png")
    with pytest.raises(ValueError, match="backend"):
        plot([empty], tmp_path / "x.png", backend="svg")


def test_flat_curve_and_single_point(tmp_path: Path) -> None:
    flat = _write_run(tmp_path / "flat", [{"frames": f, "episode_return": 1.0} for f in range(5)])
    one = _write_run(tmp_path / "one", [{"frames": 7, "episode_return": 3.0}])
    image, _ = _read_png(plot([flat, one], tmp_path / "f.png", backend="builtin"))
    assert _colour_count(image, PALETTE[0]) > 0 and _colour_count(image, PALETTE[1]) > 0
