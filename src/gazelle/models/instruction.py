"""Language instructions: hashed word tokens -> embedding -> LSTM, as in the IMPALA agent.

Text becomes ids in the runtime (`tokenize`, numpy, no torch graph); the agent embeds them
(`InstructionEncoder`). Ids: `1 + bucket` for a word, with `bucket = crc32(utf-8 word) % 1000`
(the same in every process and on every run, unlike Python's salted `hash()`), and `0` for
padding after the last word. Collisions between words are possible and accepted (the seed
does the same with its 1000 hash buckets).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from gazelle.types import TEXT_TOKENS

#: Number of hash buckets for words; ids are `1..NUM_BUCKETS`, 0 is padding.
NUM_BUCKETS = 1000
#: Default number of token ids per instruction (longer instructions are cut): what a text
#: field of an unroll holds.
MAX_TOKENS = TEXT_TOKENS
PADDING_ID = 0


def token_id(word: str) -> int:
    """The id of one word: `1 + crc32(utf-8 bytes) % NUM_BUCKETS`, in `1..NUM_BUCKETS`."""
    return 1 + zlib.crc32(word.encode("utf-8")) % NUM_BUCKETS


@lru_cache(maxsize=4096)
def _tokenize_one(text: str, max_tokens: int) -> tuple[int, ...]:
    # why: envs repeat the same few instructions every step; hash each text once.
    return tuple(token_id(word) for word in text.split()[:max_tokens])


def tokenize(texts: Sequence[str], max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """Hashes whitespace-separated words of each text into token ids.

    Args:
        texts: `N` instructions.
        max_tokens: ids kept per instruction; later words are dropped.

    Returns:
        int64 `[N, max_tokens]`: ids `1..NUM_BUCKETS` from the left, then `0` padding.
    """
    ids = np.zeros((len(texts), max_tokens), dtype=np.int64)
    for row, text in enumerate(texts):
        tokens = _tokenize_one(text, max_tokens)
        ids[row, : len(tokens)] = tokens
    return ids


class InstructionEncoder(nn.Module):
    """Embedding 20 -> LSTM 64 over token ids; the output at the last real token.

    Input ids `[B, L]` (a step) or `[T, B, L]` (an unroll), int64, padding `0` after the
    words; output float32 `[B, 64]` or `[T, B, 64]`. The length of an instruction is its
    number of non-zero ids. An empty instruction (length 0) gives zeros, as the seed's
    `dynamic_rnn` (zero outputs past the length) does.

    The LSTM always runs in float32 (autocast is switched off inside). Identical rows (an
    env's instruction repeats over an unroll) are encoded once.
    """

    def __init__(self, embedding_size: int = 20, hidden_size: int = 64):
        super().__init__()
        self.embedding = nn.Embedding(NUM_BUCKETS + 1, embedding_size, padding_idx=PADDING_ID)
        self.lstm = nn.LSTM(embedding_size, hidden_size, batch_first=True)
        self.output_size = hidden_size

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """`[..., L]` int64 ids -> `[..., hidden_size]` float32."""
        lead_shape = ids.shape[:-1]
        flat = ids.reshape(-1, ids.shape[-1])
        unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
        lengths = (unique != PADDING_ID).sum(dim=1)
        # why: words sit at the left, so ids past the longest instruction are all padding;
        # keep at least one column so that an all-empty batch still runs the LSTM.
        width = max(int(lengths.max()), 1) if unique.shape[0] else 1
        with torch.autocast(unique.device.type, enabled=False):
            outputs, _ = self.lstm(self.embedding(unique[:, :width]))  # [U, width, H]
        # why: the output for an instruction of length n is at index n - 1; the clamp makes
        # length 0 read index 0, which the mask then zeroes.
        last = (lengths - 1).clamp(min=0)
        encoded = outputs[torch.arange(unique.shape[0], device=ids.device), last]
        encoded = encoded * (lengths > 0).unsqueeze(-1).to(encoded.dtype)
        return encoded[inverse].reshape(*lead_shape, self.output_size)
