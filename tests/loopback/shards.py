"""What a sharded read should request, worked out from a shard's raw bytes in the tests."""

from __future__ import annotations

import numpy as np


def shard_table(body: bytes, n_inner: int) -> np.ndarray:
    """The ``(offset, length)`` index of a shard (index at the end, crc32c last), parsed here."""
    return np.frombuffer(body[-(16 * n_inner + 4) : -4], dtype="<u8").reshape(n_inner, 2)


def byte_runs(table: np.ndarray, flat: list[int]) -> list[tuple[int, int]]:
    """Byte runs of the needed inner chunks, merging only touching ranges (max_gap=0)."""
    spans = sorted((int(table[i, 0]), int(table[i, 1])) for i in flat)
    runs: list[tuple[int, int]] = []
    for start, length in spans:
        if runs and runs[-1][0] + runs[-1][1] == start:
            runs[-1] = (runs[-1][0], runs[-1][1] + length)
        else:
            runs.append((start, length))
    return runs
