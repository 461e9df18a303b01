"""Faults of the run's own files: a corrupt checkpoint is replaced by the previous one at
resume."""

from __future__ import annotations

import pytest

from gazelle import checkpoint
from gazelle.checkpoint import CheckpointError, load_or_previous, previous_path, save


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
