"""Weights & Biases tracking: a real CartPole run in offline mode (no network) read back from
wandb's own run file, its resume, and the one-line errors (no wandb package, a bad mode,
a W&B run that cannot start)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# why a plain import: the dev extra installs wandb, so a missing one is a failure, not a skip.
import wandb

from gazelle.algorithms.preflight import check_wandb
from gazelle.cli import main
from gazelle.config import Config, ConfigError
from gazelle.tracking import RUN_ID_FILE, WandbSink

#: The .wandb file: a 7-byte header, then records in 32 KiB blocks, each chunk behind a
#: 7-byte header (crc32, length, kind), as in LevelDB's log format; kinds 1 (whole) or
#: 2, 3, 4 (first, middle, last piece of a record).
BLOCK, CHUNK_HEADER = 32768, 7
FULL, LAST = 1, 4


def _records(path: Path) -> Iterator[Any]:
    """The protobuf records of a .wandb run file, parsed with wandb's own message types."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pieces = 7, []
    while pos + CHUNK_HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER:  # the tail of a block too short for a header: padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if kind == 0:  # zero padding to the end of the block
            pos += room
            continue
        pieces.append(data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length])
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(pieces))
            pieces = []
            yield record


def _key(item: Any) -> str:
    """A history item's metric name (wandb keeps it in `key` or as its `nested_key` parts)."""
    return str(item.key) or "/".join(item.nested_key)


def _read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The config and the history rows of one offline run directory."""
    (path,) = run_dir.glob("run-*.wandb")
    config: dict[str, Any] = {}
    history = []
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
    return config, history


def _train(logdir: Path, tmp_path: Path, *flags: str, **env: str) -> str:
    """`gazelle train` on CartPole with W&B's own files kept under `tmp_path` and no
    reachable W&B server (offline must not need one)."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")},
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "WANDB_BASE_URL": "http://127.0.0.1:9",  # why: nothing listens there
        **env,
    }
    command = [sys.executable, "-m", "gazelle.cli", "train", "--logdir", str(logdir)]
    small = ["--num-actors", "2", "--envs-per-actor", "2", "--batch-size", "4"]
    small += ["--unroll-length", "10", "--log-interval-s", "0.5"]
    proc = subprocess.run(
        [*command, *small, "--wandb", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _rows(logdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_offline_run_logs_the_progress_rows_and_config_under_the_logdir(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    _train(logdir, tmp_path, "--wandb-mode", "offline", "--total-frames", "4000")
    (run_dir,) = (logdir / "wandb").glob("offline-run-*")
    run_id = (logdir / RUN_ID_FILE).read_text().strip()
    assert run_dir.name.endswith(run_id)
    config, history = _read_run(run_dir)
    rows = _rows(logdir)
    assert len(history) == len(rows) >= 2
    for row, logged in zip(rows, history):
        expected = {k: v for k, v in row.items() if v is not None and k != "wall_time"}
        assert {k: logged[k] for k in expected} == pytest.approx(expected)
    # each interval's row: the scalars TensorBoard got then, the returns, the rates
    for key in ("losses/total", "charts/fps", "charts/policy_lag", "timing/learner", "fps"):
        assert all(key in logged for logged in history[:-1]), key
    last = history[-1]  # the final row
    assert last["frames"] == 4000 and "losses/total" in last
    assert "episode_return" in last and "episode_return/CartPole-v1" in last
    # the resolved config (preset values filled in), and where the code came from
    assert config["run"]["logdir"] == str(logdir)
    assert config["impala"]["batch_size"] == 4 and config["impala"]["optimizer"] is not None
    assert config["env"]["id"] == "CartPole-v1" and config["model"]["torso"] == "mlp"
    assert config["provenance"]["versions"]["torch"]


@pytest.mark.slow
def test_resumed_run_continues_the_same_wandb_run(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    _train(logdir, tmp_path, "--total-frames", "2000", WANDB_MODE="offline")
    run_id = (logdir / RUN_ID_FILE).read_text().strip()
    _train(logdir, tmp_path, "--total-frames", "4000", WANDB_MODE="offline")
    assert (logdir / RUN_ID_FILE).read_text().strip() == run_id
    first, second = sorted((logdir / "wandb").glob("offline-run-*"))
    assert first.name.endswith(run_id) and second.name.endswith(run_id)
    _, before = _read_run(first)
    _, after = _read_run(second)
    assert before[-1]["frames"] == 2000
    assert after[0]["frames"] >= 2000 and after[-1]["frames"] == 4000


def test_missing_wandb_is_one_line_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # why: `import wandb` now fails
    with pytest.raises(ConfigError) as err:
        check_wandb(Config.of(wandb=True))
    assert "pip install 'gazelle[wandb]'" in str(err.value)
    check_wandb(Config.of(wandb=False))  # not asked for: no check
    for algo in ("impala", "a3c"):
        logdir = tmp_path / algo
        with pytest.raises(SystemExit) as exit_:
            main(["train", "--algo", algo, "--wandb", "--logdir", str(logdir)])
        assert exit_.value.code == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith("gazelle train: error: --wandb:")
        assert "pip install 'gazelle[wandb]'" in error and "Traceback" not in error
        assert not logdir.exists()  # nothing was probed, written or started


def test_bad_wandb_mode_names_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--wandb", "--wandb-mode", "sometimes", "--logdir", str(tmp_path / "x")])
    error = capsys.readouterr().err
    assert "--wandb-mode: invalid value 'sometimes'; allowed: online | offline" in error


def test_a_wandb_run_that_cannot_start_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(**kwargs: Any) -> None:
        raise wandb.errors.UsageError("api_key not configured (no-tty)\ncall wandb.login()")

    monkeypatch.setattr(wandb, "init", refuse)
    config = Config.of(wandb=True, wandb_mode="online", logdir=str(tmp_path))
    with pytest.raises(ConfigError) as err:
        WandbSink.start(config, resuming=False)
    message = str(err.value)
    assert message.startswith("--wandb-mode: W&B could not start a run (api_key not configured")
    assert "offline" in message and "\n" not in message
