"""Faults of the run's own files: a full disk mid-run ends it in one line (no traceback, no
second error from the final save), and a corrupt checkpoint is replaced by the previous
one at resume."""

from __future__ import annotations

import errno
import json
import os
import re

import numpy as np
import pytest
import torch

from gazelle import checkpoint, logging
from gazelle.checkpoint import CheckpointError, load_or_previous, previous_path, save
from gazelle.cli import main


class FillingDisk:
    """A disk that fills up at the `rows`-th progress row: from then on every write to
    progress.jsonl and every checkpoint save fails with ENOSPC, as on a real full disk."""

    def __init__(self, rows: int) -> None:
        self.rows, self.written, self.full = rows, 0, False

    def fail(self) -> None:
        self.full = True
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def open(self, path, mode="r", *args, **kwargs):
        real = open(path, mode, *args, **kwargs)  # noqa: SIM115 (the logger closes it)
        return _FillingFile(real, self) if str(path).endswith("progress.jsonl") else real

    def torch_save(self, real_save):
        def save(obj, f, *args, **kwargs):
            if self.full:
                self.fail()
            return real_save(obj, f, *args, **kwargs)

        return save


class _FillingFile:
    def __init__(self, real, disk: FillingDisk) -> None:
        self._real, self._disk = real, disk

    def write(self, data):
        if self._disk.full:
            self._disk.fail()
        self._disk.written += 1
        if self._disk.written >= self._disk.rows:
            self._disk.fail()
        return self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_full_disk_mid_run_ends_it_in_one_line(tmp_path, monkeypatch, capsys, algo):
    disk = FillingDisk(rows=4)
    monkeypatch.setattr(logging, "open", disk.open, raising=False)
    monkeypatch.setattr(checkpoint.torch, "save", disk.torch_save(torch.save))
    sizes = ["--batch-size", "4"] if algo == "impala" else []
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", algo, "--env", "CartPole-v1", "--num-actors", "2",
              "--envs-per-actor", "2", *sizes, "--unroll-length", "10", "--total-frames",
              "1e9", "--log-interval-s", "0.3", "--logdir", str(tmp_path)])  # fmt: skip
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    progress = tmp_path / "progress.jsonl"
    assert captured.err.splitlines()[-1] == (
        f"gazelle train: error: an I/O error stopped the run: {progress}: No space left on "
        "device (ENOSPC); free some space, then re-run the same command to resume from the "
        "last checkpoint"
    )
    assert "Traceback" not in captured.out + captured.err
    ckpt = tmp_path / "checkpoint.pt"
    assert (
        f"gazelle: warning: the final checkpoint failed: {ckpt}: No space left on device "
        f"(ENOSPC); {ckpt} keeps the last one written, if any"
    ) in captured.out
    assert "the last progress row failed" in captured.out
    assert disk.written == 4  # the failing row, and no write after it went through


def test_a_corrupt_checkpoint_and_its_previous_copy_are_both_named(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save(path, {"frames": 1})
    save(path, {"frames": 2})
    path.write_bytes(path.read_bytes()[:100])  # torn
    state, source, why = load_or_previous(path)
    assert state["frames"] == 1 and source == previous_path(path)
    assert str(path) in str(why)
    previous_path(path).write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as err:
        load_or_previous(path)
    message = str(err.value)
    assert f"cannot load checkpoint {path} " in message
    assert f"its previous copy: cannot load checkpoint {previous_path(path)} " in message
    assert "\n" not in message


@pytest.mark.slow
def test_a_corrupt_checkpoint_resumes_from_the_previous_one(small_config, tmp_path, capsys):
    from gazelle.algorithms.impala import train

    # why: a save every 0.2 s, so that checkpoint.pt.prev holds an earlier one
    first = train(small_config(total_frames=4_000, checkpoint_interval_s=0.2))
    path = tmp_path / "checkpoint.pt"
    prev_frames = checkpoint.load(previous_path(path))["frames"]
    assert 0 < prev_frames <= first.frames
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a torn write
    capsys.readouterr()
    second = train(small_config(total_frames=prev_frames + 2_000))
    out = capsys.readouterr().out
    assert f"gazelle: warning: cannot load checkpoint {path} " in out
    assert f"resuming from {previous_path(path)}, the one saved before it" in out
    assert f"the unreadable file is kept as {path}.corrupt" in out
    assert f"gazelle: resumed from {previous_path(path)} at {prev_frames:,} frames" in out
    assert second.frames >= prev_frames + 2_000
    assert (tmp_path / "checkpoint.pt.corrupt").read_bytes() == data[: len(data) // 2]
    assert checkpoint.load(path)["frames"] == second.frames


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_run_stops_once_its_100_episode_mean_reaches_the_target_return(tmp_path, capsys, algo):
    """`--target-return`: random CartPole play lasts ~22 steps, so a target of 12 is met as
    soon as the window holds 100 episodes (~2-3K frames), long before the 1M budget."""
    logdir = tmp_path / algo
    main(["train", "--algo", algo, "--env", "CartPole-v1", "--num-actors", "2",
          "--envs-per-actor", "4", "--total-frames", "1000000", "--target-return", "12",
          "--log-interval-s", "0.5", "--logdir", str(logdir)])  # fmt: skip
    out = capsys.readouterr().out
    reached = re.search(r"stopped at --target-return 12: reached at ([\d,]+) frames", out)
    assert reached, out
    rows = [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]
    frames = rows[-1]["frames"]
    assert int(reached.group(1).replace(",", "")) <= frames < 50_000, (reached.group(0), frames)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    returns = [e.value for e in events.Scalars("charts/episode_return")]
    assert len(returns) >= 100 and np.mean(returns[-100:]) >= 12


@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_target_return_not_reached_runs_the_whole_budget_and_says_so(tmp_path, algo):
    """A CartPole return of 1,000 cannot be reached (episodes end at 500): the run goes to
    its frame budget and reports no frame count for the target."""
    import gazelle

    result = gazelle.train(
        {"algo": algo, "env": "CartPole-v1", "num_actors": 2, "envs_per_actor": 4,
         "total_frames": 3_000, "target_return": 1_000.0, "logdir": str(tmp_path)},
    )  # fmt: skip
    assert result.frames >= 3_000 and result.target_reached_at is None, result


def test_the_target_return_needs_a_full_window(tmp_path):
    from gazelle.logging import RETURN_WINDOW, RunLogger

    logger = RunLogger(tmp_path, total_frames=1000, console=False, tensorboard=False)
    for _ in range(RETURN_WINDOW - 1):
        logger.episode("CartPole-v1", 50.0, 200, frames=0)
    assert not logger.reached(10.0)  # 99 episodes: not yet
    logger.episode("CartPole-v1", 50.0, 200, frames=0)
    assert logger.reached(10.0) and logger.reached(50.0) and not logger.reached(50.5)
    assert not logger.reached(None)
