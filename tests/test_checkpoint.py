"""Checkpoints: round trip, exact RNG restore, atomic save, weights_only loading."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from gazelle import checkpoint
from gazelle.checkpoint import (
    CheckpointError,
    CheckpointNotFoundError,
    load,
    previous_path,
    rng_state,
    save,
    set_rng_state,
)


def _model_and_optimizer(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.99, eps=0.01)
    return model, optimizer


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.ones(3, 4)).square().sum().backward()
    optimizer.step()


def _draws() -> tuple[list[float], list[float], list[float], list[float]]:
    """Draws from every RNG, including numpy's cached-gaussian path."""
    return (
        [random.random(), random.gauss(0, 1)],
        np.random.rand(3).tolist(),  # noqa: NPY002
        [float(np.random.standard_normal())],  # noqa: NPY002
        torch.rand(3).tolist(),
    )


def test_round_trip_model_optimizer_counters_and_rng(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    _train_step(model, optimizer)
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    np.random.standard_normal()  # noqa: NPY002 (and in numpy's)
    state: dict[str, Any] = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "frames": 123_456,
        "policy_version": 7,
        "lr_schedule": {"step": 42, "lr": 5e-4},
        "rng": rng_state(),
    }
    path = tmp_path / "ckpt.pt"
    save(path, state)
    expected = _draws()
    _draws()  # move every RNG on

    loaded = load(path)
    set_rng_state(loaded["rng"])
    assert _draws() == expected

    restored, restored_opt = _model_and_optimizer(99)
    restored.load_state_dict(loaded["model"])
    restored_opt.load_state_dict(loaded["optimizer"])
    assert loaded["frames"] == 123_456 and loaded["policy_version"] == 7
    assert loaded["lr_schedule"] == {"step": 42, "lr": 5e-4}
    for a, b in zip(model.parameters(), restored.parameters()):
        assert torch.equal(a, b)
    # The RMSProp square averages came back: one more step gives identical weights.
    _train_step(model, optimizer)
    _train_step(restored, restored_opt)
    for a, b in zip(model.parameters(), restored.parameters()):
        assert torch.equal(a, b)


def test_save_keeps_previous_and_replaces_target(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ckpt.pt"
    save(path, {"frames": 1})
    assert not previous_path(path).exists()
    save(path, {"frames": 2})
    save(path, {"frames": 3})
    assert load(path)["frames"] == 3
    assert load(previous_path(path))["frames"] == 2
    save(path, {"frames": 4}, keep_previous=False)
    assert load(previous_path(path))["frames"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["ckpt.pt", "ckpt.pt.prev"]


def test_crash_during_save_leaves_old_checkpoint_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ckpt.pt"
    save(path, {"frames": 10, "w": torch.arange(5)})
    before = path.read_bytes()
    real_save = torch.save

    def crashing_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        real_save(obj, f, *args, **kwargs)
        f.truncate(f.tell() // 2)  # half written...
        raise OSError("disk full")  # ...then the crash

    monkeypatch.setattr(checkpoint.torch, "save", crashing_save)
    with pytest.raises(OSError, match="disk full"):
        save(path, {"frames": 20, "w": torch.arange(1000)})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert load(path)["frames"] == 10
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_save_removes_temp_files_a_killed_save_left(tmp_path: Path) -> None:
    """A SIGKILL mid-save leaves its temp file; the next save deletes it once it is stale,
    but never a temp file that another save may be writing right now."""
    path = tmp_path / "ckpt.pt"
    stale = tmp_path / ".ckpt.pt.k1ll3d.tmp"
    fresh = tmp_path / ".ckpt.pt.wr1t1ng.tmp"
    other = tmp_path / ".other.pt.k1ll3d.tmp"
    for leftover in (stale, fresh, other):
        leftover.write_bytes(b"half a checkpoint")
    old = time.time() - 2 * checkpoint.STALE_TEMP_S
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    save(path, {"frames": 1})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".ckpt.pt.wr1t1ng.tmp", ".other.pt.k1ll3d.tmp", "ckpt.pt"]


def test_load_missing_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt"
    with pytest.raises(CheckpointNotFoundError, match=r"nope\.pt"):
        load(path)
    with pytest.raises(FileNotFoundError):  # also catchable as the builtin
        load(path)


def test_load_truncated_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save(path, {"w": torch.zeros(1000)})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"ckpt\.pt"):
        load(path)


class _Arbitrary:
    """Not loadable under weights_only: unpickling it could run arbitrary code."""

    def __init__(self) -> None:
        self.payload = 1


def test_load_refuses_arbitrary_pickled_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"obj": _Arbitrary()}, path)
    # Sanity: the file itself is fine for an unsafe load.
    assert torch.load(path, weights_only=False)["obj"].payload == 1
    with pytest.raises(CheckpointError, match=r"evil\.pt"):
        load(path)


def test_load_refuses_a_non_dict(tmp_path: Path) -> None:
    path = tmp_path / "list.pt"
    torch.save([1, 2], path)
    with pytest.raises(CheckpointError, match="list"):
        load(path)


def test_rng_state_holds_only_weights_only_types(tmp_path: Path) -> None:
    state = rng_state()
    path = tmp_path / "rng.pt"
    torch.save(state, path)
    again = torch.load(path, weights_only=True)
    assert torch.equal(again["torch"], state["torch"])
    assert torch.equal(again["numpy"]["keys"], state["numpy"]["keys"])


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "copy"])
def test_every_file_a_checkpoint_puts_in_place_is_fsynced_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """A rename puts a file in place only after its data was fsynced, and the directory is
    fsynced after the rename: for the checkpoint, its `.prev` copy (hard link or, where the
    filesystem has none, a copy), the restore of `.prev` over an unreadable checkpoint, and
    `write_text` (the run's config.json). Else a power loss can leave an empty file."""
    synced: list[tuple[int, int]] = []  # (device, inode) of each fsync
    placed: list[tuple[str, bool]] = []  # (where a rename put a file, its data fsynced first)
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        info = os.stat(src)
        # why: by inode, so a hard link shares the synced data of the file it links
        placed.append((os.path.basename(dst), (info.st_dev, info.st_ino) in synced))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    if not links:
        monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(OSError("no links")))
    path = tmp_path / "checkpoint.pt"
    save(path, {"frames": 1})
    save(path, {"frames": 2})  # the first one becomes .prev
    path.write_bytes(b"torn")
    checkpoint.put_previous_back(path)
    checkpoint.write_text(tmp_path / "config.json", "{}\n")
    assert load(path)["frames"] == 1 and load(previous_path(path))["frames"] == 1
    assert {name for name, _ in placed} >= {"checkpoint.pt", "checkpoint.pt.prev", "config.json"}
    assert all(ok for _, ok in placed), placed
    # the directory itself after each rename (the rename is durable only then)
    directory = os.stat(tmp_path)
    assert synced.count((directory.st_dev, directory.st_ino)) >= 4, synced
