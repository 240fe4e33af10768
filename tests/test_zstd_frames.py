"""The zstd frame walk that guards nvCOMP (cuzarr.gpu.zstd_frames) and its kernel's C source.

:func:`walk` must accept every frame libzstd writes (levels, sizes of 0 bytes to several
blocks, raw and RLE blocks, checksums, every frame-header layout) and refuse every truncation
and a zeroed tail; ``cuzarr_zstd_walk`` (src/cuzarr/gpu/kernels.py), compiled with the host
C++ compiler and run thread by thread as the GPU backend launches it, must give the same
verdict for every frame here.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import zstandard

from cuzarr.errors import CorruptChunkError
from cuzarr.gpu import zstd_frames
from cuzarr.gpu.zstd_frames import BROKEN, MORE, OK, header_length, walk, walk_frame
from kernel_host import host_kernel


def _payloads() -> dict[str, bytes]:
    rng = np.random.default_rng(3)
    ramp = (np.arange(200_000) % 251).astype(np.uint8).tobytes()
    return {
        "empty": b"",
        "one-byte": b"x",
        "rle": b"\x07" * 300_000,  # RLE blocks
        "random": rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes(),  # raw blocks
        "ramp": ramp,
        "mixed": ramp[:70_000] + b"\x00" * 140_000 + rng.bytes(90_000),
    }


def _frames() -> dict[str, bytes]:
    out = {}
    for name, data in _payloads().items():
        for level in (1, 3, 19):
            out[f"{name}-l{level}"] = zstandard.ZstdCompressor(level=level).compress(data)
        out[f"{name}-checksum"] = zstandard.ZstdCompressor(write_checksum=True).compress(data)
        out[f"{name}-nosize"] = zstandard.ZstdCompressor(write_content_size=False).compress(data)
        chunker = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        out[f"{name}-stream"] = chunker.compress(data) + chunker.flush()
    return out


FRAMES = _frames()


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_every_frame_libzstd_writes_walks_to_its_end(name):
    frame = FRAMES[name]
    assert zstandard.ZstdDecompressor().decompressobj().decompress(frame) is not None
    assert walk_frame(frame) == OK


def test_header_lengths_of_every_layout():
    # libzstd's layouts: single segment with a 1-, 2- or 4-byte content size, a window
    # descriptor with a 4-byte size, none (streaming); each decoded by hand from its bytes.
    layouts = set()
    for size in (0, 100, 300, 70_000, 5_000_000):
        params = zstandard.ZstdCompressionParameters.from_level(3, source_size=size)
        frame = zstandard.ZstdCompressor(compression_params=params).compress(b"a" * size)
        layouts.add(frame[4] & 0xE3)
        assert walk_frame(frame) == OK
    layouts.add(FRAMES["ramp-stream"][4] & 0xE3)
    assert layouts == {0x20, 0x60, 0xA0, 0x80, 0x00}
    for frame in [*FRAMES.values()]:
        fhd = frame[4]
        single = bool(fhd & 0x20)
        fcs = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fhd >> 6]
        assert header_length(frame) == 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    # What libzstd writes only past 4 GiB or with a dictionary, by hand: an 8-byte content
    # size with a window descriptor (14 bytes), and a 4-byte dictionary id with a 2-byte size
    # in a single segment (11 bytes).
    magic = b"\x28\xb5\x2f\xfd"
    assert header_length(magic + bytes([0xC0]) + bytes(9)) == 14
    assert header_length(magic + bytes([0x63]) + bytes(6)) == 11
    samples = [bytes([i % 7]) * 200 + bytes(range(i % 50)) for i in range(400)]
    d = zstandard.train_dictionary(4096, samples)
    frame = zstandard.ZstdCompressor(dict_data=d).compress(b"abc" * 100)
    assert frame[4] & 3  # a dictionary id is present
    assert walk_frame(frame) == OK


@pytest.mark.parametrize("name", ["ramp-l3", "random-l1", "mixed-checksum", "empty-l1", "rle-l3"])
def test_every_truncation_is_broken(name):
    frame = FRAMES[name]
    first = header_length(frame)
    checksum = bool(frame[4] & 0x04)
    for cut in range(first, len(frame)):
        assert walk(frame[:cut], first, cut, checksum) == BROKEN, cut


def test_zeroed_tails_trailing_bytes_and_bad_blocks():
    frame = FRAMES["ramp-l3"]
    first = header_length(frame)
    n = len(frame)
    zeroed = frame[: n // 2] + b"\x00" * (n - n // 2)
    assert walk(zeroed, first, n, False) == BROKEN
    two = frame + FRAMES["mixed-l1"]
    assert walk(two, first, len(two), False) == MORE
    # A reserved block type, and a block over 128 KiB, right after the header.
    for header in ((3 << 1) | 1, (zstd_frames.MAX_BLOCK + 1) << 3):
        bad = frame[:first] + header.to_bytes(3, "little") + frame[first + 3 :]
        assert walk(bad, first, n, False) == BROKEN
    # A checksum flag without its 4 bytes, and 4 bytes too many without the flag.
    with_sum = FRAMES["ramp-checksum"]
    assert walk(with_sum, header_length(with_sum), len(with_sum), False) == MORE
    assert walk(frame, first, n, True) == BROKEN


def test_short_headers_are_corrupt():
    with pytest.raises(CorruptChunkError, match="fewer than 5"):
        header_length(b"\x28\xb5\x2f")
    frame = FRAMES["ramp-l3"]
    with pytest.raises(CorruptChunkError, match="declared"):
        header_length(frame[: header_length(frame) - 1])


# ---------------------------------------------------------------------- the kernel's C source


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    return host_kernel(
        tmp_path_factory.mktemp("walk-kernel"),
        "cuzarr_zstd_walk",
        "const u8* src, const i64* table, i64* out, i64 nrows",
        [ctypes.c_void_p] * 3 + [ctypes.c_int64],
    )


def test_the_kernel_gives_the_walks_verdicts(kernel):
    # Every frame above, whole, truncated, zero-tailed and followed by another, packed into
    # one buffer at 16-byte aligned slots as a wave is; a grid smaller than the rows.
    cases = []
    for frame in FRAMES.values():
        cases += [frame, frame[: len(frame) * 2 // 3], frame + FRAMES["one-byte-l1"]]
        cases.append(frame[: len(frame) // 2] + b"\x00" * (len(frame) - len(frame) // 2))
    buf = bytearray()
    rows, want = [], []
    for c in cases:
        buf += b"\x00" * (-len(buf) % 16)
        start = len(buf)
        buf += c
        first = header_length(c)
        checksum = bool(c[4] & 0x04)
        rows.append((start + first, start + len(c), int(checksum)))
        want.append(walk(c, first, len(c), checksum))
    src = np.frombuffer(bytes(buf), np.uint8).copy()
    table = np.array(rows, np.int64)
    out = np.full(len(rows), -1, np.int64)
    kernel(src.ctypes.data, table.ctypes.data, out.ctypes.data, len(rows), 3, 32)
    assert out.tolist() == want
    assert {OK, BROKEN, MORE} <= set(want)
