"""Instruction tokens (stable hashing) and the instruction encoder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

from gazelle.models import tokenize
from gazelle.models.instruction import NUM_BUCKETS, InstructionEncoder

TEXTS = ["go to the red ball", "", "pick up a purple key then open the door", "go   to  the\tred"]


def test_tokenize_layout():
    ids = tokenize(TEXTS, max_tokens=6)
    assert ids.dtype == np.int64
    assert ids.shape == (4, 6)
    lengths = (ids != 0).sum(axis=1)
    assert lengths.tolist() == [5, 0, 6, 4]  # the third is cut at 6 words
    # words from the left, then padding; ids in 1..NUM_BUCKETS.
    assert (ids[0, 5:] == 0).all() and (ids[0, :5] >= 1).all()
    assert ids.max() <= NUM_BUCKETS
    # the same word always has the same id, whatever the spacing.
    np.testing.assert_array_equal(ids[3, :4], ids[0, :4])
    assert ids[0, 0] == 1 + zlib.crc32(b"go") % NUM_BUCKETS


def test_tokenize_values_are_pinned():
    # Changing the hash would silently break every saved checkpoint with instructions.
    np.testing.assert_array_equal(
        tokenize(["go to the red ball"], max_tokens=6), [[775, 757, 79, 456, 380, 0]]
    )


def test_tokenize_is_the_same_in_other_processes():
    code = (
        "import json; from gazelle.models import tokenize; "
        f"print(json.dumps([hash('go'), tokenize({TEXTS!r}).tolist()]))"
    )
    here = tokenize(TEXTS).tolist()
    salted = set()
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        python_hash, ids = json.loads(out.stdout)
        salted.add(python_hash)
        assert ids == here
    assert len(salted) == 2  # the processes did hash strings differently


def reference_encoding(encoder: InstructionEncoder, words: list[int]) -> torch.Tensor:
    """LSTM over exactly the real tokens, one instruction at a time; its last output."""
    if not words:
        return torch.zeros(encoder.output_size)
    outputs, _ = encoder.lstm(encoder.embedding(torch.tensor([words])))
    return outputs[0, -1]


def test_encoder_output_is_the_lstm_output_at_the_last_real_token():
    torch.manual_seed(0)
    encoder = InstructionEncoder()
    ids = torch.from_numpy(tokenize(TEXTS, max_tokens=8))
    out = encoder(ids)
    assert out.shape == (4, 64)
    for row, text_ids in enumerate(ids.tolist()):
        words = [i for i in text_ids if i != 0]
        torch.testing.assert_close(out[row], reference_encoding(encoder, words))


def test_empty_instruction_gives_zeros_and_gradients_flow():
    torch.manual_seed(0)
    encoder = InstructionEncoder()
    ids = torch.from_numpy(tokenize(["", ""]))
    out = encoder(ids)
    assert torch.equal(out, torch.zeros(2, 64))
    mixed = encoder(torch.from_numpy(tokenize(["", "go"])))
    assert torch.equal(mixed[0], torch.zeros(64))
    mixed.sum().backward()
    assert encoder.embedding.weight.grad is not None
    assert encoder.embedding.weight.grad.abs().sum() > 0


def test_padding_width_does_not_matter():
    torch.manual_seed(0)
    encoder = InstructionEncoder()
    short = encoder(torch.from_numpy(tokenize(TEXTS, max_tokens=10)))  # all words fit
    long = encoder(torch.from_numpy(tokenize(TEXTS, max_tokens=32)))
    torch.testing.assert_close(short, long)


@pytest.mark.parametrize("time_major", [False, True])
def test_encoder_accepts_step_and_unroll_ids(time_major):
    torch.manual_seed(0)
    encoder = InstructionEncoder()
    ids = torch.from_numpy(tokenize(TEXTS))  # [4, 32]
    if time_major:
        unroll = ids.view(2, 2, 32)
        out = encoder(unroll)
        assert out.shape == (2, 2, 64)
        torch.testing.assert_close(out.view(4, 64), encoder(ids))
    else:
        assert encoder(ids).shape == (4, 64)


def test_repeated_rows_encode_like_single_rows():
    torch.manual_seed(0)
    encoder = InstructionEncoder()
    ids = torch.from_numpy(tokenize([TEXTS[0], TEXTS[2], TEXTS[0], TEXTS[0]]))
    out = encoder(ids)
    torch.testing.assert_close(out[0], out[2])
    torch.testing.assert_close(out[1], encoder(ids[1:2])[0])
