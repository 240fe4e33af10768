"""Large zstd chunks decoded by one call of numcodecs' libzstd (``zstd_batch.decode_into``).

The call must give exactly what the general decoder gives for every valid chunk (one frame or
several, with or without a content size or checksum, behind a skippable frame), and refuse
(``False``, leaving the chunk to python-zstandard's decoder, which names the problem) anything
that does not decode to exactly the chunk's bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zstandard

import cuzarr
from cuzarr.codecs import numcodecs_, zstd_batch
from cuzarr.errors import CorruptChunkError
from cuzarr.testing import use_pipeline

needs_call = pytest.mark.skipif(
    not zstd_batch.available(), reason="no batch helper or libzstd symbols here"
)

NBYTES = 192 * 1024  # above ZSTD_ONE_CALL_MIN: the one-call path


def _payload(nbytes: int = NBYTES, seed: int = 5) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    values = np.cumsum(rng.normal(size=nbytes // 4)).astype("float32")
    values[: nbytes // 16] = 0  # a compressible stretch and a noisy one: Huffman and sequences
    return values.view(np.uint8)


def _skippable(size: int) -> bytes:
    return struct.pack("<II", 0x184D2A50, size) + b"\xab" * size


def _valid_chunks() -> dict[str, tuple[bytes, np.ndarray[Any, Any]]]:
    data = _payload()
    half = NBYTES // 2
    no_size = zstandard.ZstdCompressor(level=3, write_content_size=False)
    zstd3 = numcodecs.Zstd(level=3)
    return {
        "numcodecs level 1": (numcodecs.Zstd(level=1).encode(data), data),
        "numcodecs level 5, checksum": (numcodecs.Zstd(level=5, checksum=True).encode(data), data),
        "python-zstandard, no content size": (no_size.compress(data.tobytes()), data),
        "two frames": (
            zstd3.encode(data[:half]) + zstd3.encode(data[half:]),
            data,
        ),
        "skippable frame first": (_skippable(24) + zstd3.encode(data), data),
        "empty frame last": (zstd3.encode(data) + zstd3.encode(b""), data),
    }


@needs_call
@pytest.mark.parametrize("case", sorted(_valid_chunks()))
def test_valid_chunks_decode_to_the_general_decoders_bytes(case: str) -> None:
    stored, want = _valid_chunks()[case]
    out = np.full(want.nbytes, 0x5A, np.uint8)
    assert zstd_batch.decode_into(np.frombuffer(stored, np.uint8), out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.frombuffer(numcodecs.Zstd().decode(stored), np.uint8), want)


def _refused() -> dict[str, tuple[bytes, int]]:
    data = _payload()
    frame = bytes(numcodecs.Zstd(level=3, checksum=True).encode(data))
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0xFF
    bad_sum = bytearray(frame)
    bad_sum[-1] ^= 0x01
    return {
        "decodes to fewer bytes": (frame, NBYTES + 4),
        "decodes to more bytes": (frame, NBYTES - 4),
        "a byte flipped": (bytes(flipped), NBYTES),
        "checksum wrong": (bytes(bad_sum), NBYTES),
        "truncated": (frame[:-100], NBYTES),
        "garbage after the frame": (frame + b"\x01\x02\x03", NBYTES),
        "not zstd": (b"\x00" * 64, NBYTES),
        "empty": (b"", NBYTES),
    }


@needs_call
@pytest.mark.parametrize("case", sorted(_refused()))
def test_what_does_not_decode_exactly_is_refused(case: str) -> None:
    stored, nbytes = _refused()[case]
    out = np.empty(nbytes, np.uint8)
    assert not zstd_batch.decode_into(np.frombuffer(stored, np.uint8), out)


@needs_call
def test_outputs_the_call_cannot_take_are_refused_untouched() -> None:
    data = _payload()
    stored = np.frombuffer(numcodecs.Zstd(level=3).encode(data), np.uint8)
    strided = np.zeros(2 * NBYTES, np.uint8)[::2]
    assert not zstd_batch.decode_into(stored, strided)
    assert not strided.any()
    frozen = np.zeros(NBYTES, np.uint8)
    frozen.flags.writeable = False
    assert not zstd_batch.decode_into(stored, frozen)
    assert not frozen.any()
    spaced = np.zeros(2 * stored.nbytes, np.uint8)
    spaced[::2] = stored
    out = np.zeros(NBYTES, np.uint8)
    assert not zstd_batch.decode_into(spaced[::2], out)
    assert not out.any()


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the outputs ``zstd_batch.decode_into`` is asked to fill."""
    seen: list[int] = []
    real = zstd_batch.decode_into

    def spy(data: Any, out: Any) -> bool:
        seen.append(out.nbytes)
        return real(data, out)

    monkeypatch.setattr(zstd_batch, "decode_into", spy)
    return seen


def test_only_large_chunks_take_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _calls(monkeypatch)
    for nbytes in (numcodecs_.ZSTD_ONE_CALL_MIN - 4, numcodecs_.ZSTD_ONE_CALL_MIN, NBYTES):
        data = _payload(nbytes)
        out = np.empty(nbytes, np.uint8)
        numcodecs_._zstd_decode_into(numcodecs.Zstd(level=3).encode(data), out, "c/0")
        np.testing.assert_array_equal(out, data)
    assert seen == [numcodecs_.ZSTD_ONE_CALL_MIN, NBYTES]


@pytest.mark.parametrize(
    ("case", "message"),
    [("decodes to fewer bytes", "decodes to"), ("a byte flipped", "corrupt"),
     ("garbage after the frame", "corrupt"), ("decodes to more bytes", "decodes to more than")],
)
def test_refused_chunks_are_named_by_the_general_decoder(case: str, message: str) -> None:
    stored, nbytes = _refused()[case]
    with pytest.raises(CorruptChunkError, match=message) as got:
        numcodecs_._zstd_decode_into(stored, np.empty(nbytes, np.uint8), "zstd in c/1/2")
    assert "c/1/2" in str(got.value)


def test_arrays_of_large_chunks_read_as_zarr_reads_them(tmp_path: Path) -> None:
    """Through the explicit API and zarr's pipeline: whole reads, chunk by chunk, a region."""
    rng = np.random.default_rng(2)
    data = np.cumsum(rng.normal(size=(300, 260)), axis=1).astype("float32")
    data[:128, :128] = 0  # one chunk of the fill value: not stored
    path = tmp_path / "big.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=data.shape, chunks=(128, 128), dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=3, checksum=True),
    )
    z[...] = data
    arr = cuzarr.open(path)
    np.testing.assert_array_equal(arr[...], data)
    np.testing.assert_array_equal(arr[5:290, 100:200], data[5:290, 100:200])
    for i in range(0, 300, 128):
        for j in range(0, 260, 128):
            box = (slice(i, i + 128), slice(j, j + 128))
            np.testing.assert_array_equal(arr[box], data[box])
    with use_pipeline("cuzarr"):
        np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)


def test_a_damaged_large_chunk_is_named(tmp_path: Path) -> None:
    data = np.cumsum(np.random.default_rng(3).normal(size=(256, 256)), axis=1).astype("float32")
    path = tmp_path / "bad.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=data.shape, chunks=(128, 128), dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=3, checksum=True),
    )
    z[...] = data
    key = path / "c" / "1" / "0"
    raw = bytearray(key.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    key.write_bytes(bytes(raw))
    arr = cuzarr.open(path)
    np.testing.assert_array_equal(arr[:128], data[:128])  # the other chunks still read
    with pytest.raises(CorruptChunkError, match=r"c/1/0"):
        arr[128:, :128]
