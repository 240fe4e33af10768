"""CPU tests of the GPU backend's host-side logic (no GPU, no GPU package needed).

Blosc frame descriptors, raw-stream location, chain classification, waves, packing, scatter
descriptors and the NumPy references of the GPU kernels, all checked against what numcodecs,
zlib, gzip and zarr produce.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import struct
import subprocess
import sys
import zlib

import numcodecs
import numpy as np
import pytest
import zarr
import zstandard
from numcodecs import Blosc
from numcodecs import lz4 as nc_lz4

import cuzarr
from cuzarr.engine.requests import ChunkRequest
from cuzarr.errors import CorruptChunkError, UnsupportedError
from cuzarr.gpu import blosc_frames, plan, streams

# ---------------------------------------------------------------- CPU stream decoders


def lz4_block_decode(src: bytes, size: int) -> bytes:
    """An independent pure-Python LZ4 block decoder (the LZ4 block format spec)."""
    out = bytearray()
    i = 0
    n = len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i : i + lit]
        i += lit
        if i >= n:
            break
        offset = src[i] | src[i + 1] << 8
        i += 2
        mlen = token & 15
        if mlen == 15:
            while True:
                b = src[i]
                i += 1
                mlen += b
                if b != 255:
                    break
        mlen += 4
        start = len(out) - offset
        for k in range(mlen):
            out.append(out[start + k])
    assert len(out) == size
    return bytes(out)


def decode_stream(name: str, data: bytes, size: int) -> bytes:
    if name == "zstd":
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if name == "zlib":
        return zlib.decompress(data)
    if name == "lz4":
        return nc_lz4.decompress(struct.pack("<i", size) + data)
    raise AssertionError(f"no CPU decoder for {name}")


def _data(n: int, itemsize: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    ramp = (np.arange(n * itemsize) // 3 % 251).astype(np.uint8)
    noise = rng.integers(0, 4, n * itemsize, dtype=np.uint8)
    return (ramp + noise).tobytes()


# ---------------------------------------------------------------- blosc frames

TYPESIZE_DTYPES = {1: "u1", 2: "u2", 3: "S3", 4: "i4", 8: "f8", 24: "V24"}


@pytest.mark.parametrize("cname", ["zstd", "lz4", "lz4hc", "zlib", "blosclz", "snappy"])
@pytest.mark.parametrize("shuffle", [Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE])
@pytest.mark.parametrize("typesize", sorted(TYPESIZE_DTYPES))
def test_blosc_descriptors_reassemble_to_numcodecs_output(cname, shuffle, typesize):
    if cname == "blosclz":
        pytest.skip("blosclz streams have no standalone CPU decoder (only c-blosc, whole frames)")
    if cname not in numcodecs.blosc.list_compressors():
        pytest.skip(f"this numcodecs build has no {cname} compressor")
    dtype = np.dtype(TYPESIZE_DTYPES[typesize])
    for blocksize in (0, 256, 4096, 100_000):
        for n in (1, 100, 1001, 40_000):
            arr = np.frombuffer(_data(n, typesize, seed=n), dtype)
            codec = Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize)
            enc = codec.encode(arr)
            frame = blosc_frames.parse_frame(enc, arr.nbytes)
            h = frame.header
            assert h.nbytes == arr.nbytes and h.cbytes == len(enc)
            assert h.typesize == typesize
            if not h.memcpyed:
                assert h.compressor == {"lz4hc": "lz4"}.get(cname, cname)
                # the streams tile the decoded frame exactly once
                cover = np.zeros(arr.nbytes, np.int64)
                for s in frame.streams:
                    cover[s["dst_offset"] : s["dst_offset"] + s["dst_size"]] += 1
                assert (cover == 1).all()
            got = blosc_frames.reassemble(frame, enc, decode_stream)
            want = np.frombuffer(codec.decode(enc), np.uint8)
            assert got.tobytes() == want.tobytes() == arr.tobytes(), (blocksize, n, h)


def test_blosc_flags_and_split_streams():
    arr = np.frombuffer(_data(50_000, 4), "<i4")
    enc = Blosc(cname="zstd", shuffle=Blosc.SHUFFLE, blocksize=65536).encode(arr)
    f = blosc_frames.parse_frame(enc)
    assert f.header.shuffle and not f.header.bitshuffle and not f.header.memcpyed
    assert f.nblocks == -(-arr.nbytes // f.header.blocksize)
    assert f.block_sizes.sum() == arr.nbytes
    # zstd blocks are not split (c-blosc's auto split mode): one stream per block
    assert f.header.dont_split and len(f.streams) == f.nblocks
    # blosclz blocks are: every full block of a 4-byte type in 4 streams, the leftover in one
    ramp = np.arange(50_000, dtype="<i4") % 100
    enc_lz = Blosc(cname="blosclz", shuffle=Blosc.SHUFFLE, blocksize=65536).encode(ramp)
    g = blosc_frames.parse_frame(enc_lz)
    assert not g.header.dont_split and g.header.compressor == "blosclz"
    assert not g.header.memcpyed
    full = g.nblocks - (arr.nbytes % g.header.blocksize > 0)
    assert len(g.streams) == full * 4 + (g.nblocks - full)
    assert set(g.streams["dst_size"][: full * 4].tolist()) == {g.header.blocksize // 4}
    enc_bit = Blosc(cname="lz4", shuffle=Blosc.BITSHUFFLE).encode(arr)
    assert blosc_frames.parse_frame(enc_bit).header.bitshuffle


def test_blosc_memcpyed_and_empty_frames():
    noise = np.random.default_rng(1).integers(0, 256, 10_000, dtype=np.uint8)
    enc = Blosc(cname="zstd", clevel=5).encode(noise)
    f = blosc_frames.parse_frame(enc, noise.nbytes)
    assert f.header.memcpyed and f.streams["stored"].all()
    assert blosc_frames.reassemble(f, enc, decode_stream).tobytes() == noise.tobytes()
    enc0 = Blosc(cname="zstd").encode(np.zeros(0, np.uint8))
    f0 = blosc_frames.parse_frame(enc0, 0)
    assert f0.nbytes == 0 and len(f0.streams) == 0


def _frame() -> bytes:
    arr = np.frombuffer(_data(20_000, 4), "<i4")
    return bytes(Blosc(cname="zstd", shuffle=Blosc.SHUFFLE, blocksize=4096).encode(arr))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:10], "shorter than the 16-byte header"),
        (lambda b: b[:-5], "header says"),
        (lambda b: b[: 16 + 8], "header says"),
        (lambda b: b[:16] + struct.pack("<i", 3) + b[20:], "starts at 3"),
        (lambda b: b[:16] + struct.pack("<i", len(b) + 10) + b[20:], "outside"),
        (lambda b: b[:4] + struct.pack("<i", -1) + b[8:], "bad sizes"),
        (lambda b: b[:8] + struct.pack("<i", 0) + b[12:], "blocksize 0"),
        (lambda b: b"\x00" + b[1:], "format version 0"),
    ],
)
def test_blosc_corrupt_frames(mutate, match):
    with pytest.raises(CorruptChunkError, match=match):
        blosc_frames.parse_frame(mutate(_frame()))


def test_blosc_corrupt_stream_size_and_expected_size():
    b = bytearray(_frame())
    first = struct.unpack_from("<i", b, 16)[0]
    struct.pack_into("<i", b, first, 1 << 30)
    with pytest.raises(CorruptChunkError, match="stream of"):
        blosc_frames.parse_frame(bytes(b))
    with pytest.raises(CorruptChunkError, match="expected 12"):
        blosc_frames.parse_frame(_frame(), expected_nbytes=12)
    with pytest.raises(UnsupportedError, match="format version 3"):
        blosc_frames.parse_frame(b"\x03" + _frame()[1:])
    with pytest.raises(UnsupportedError, match="reserved"):
        f = bytearray(_frame())
        f[2] |= 0x08
        blosc_frames.parse_frame(bytes(f))


# ---------------------------------------------------------------- shuffle references


@pytest.mark.parametrize("typesize", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("nbytes", [0, 7, 64, 1000, 4099])
def test_byte_shuffle_matches_numcodecs(typesize, nbytes):
    nbytes -= nbytes % typesize
    block = np.frombuffer(_data(nbytes, 1), np.uint8)
    want = np.frombuffer(numcodecs.Shuffle(elementsize=typesize).encode(block), np.uint8)
    assert plan.byte_shuffle(block, typesize).tobytes() == want.tobytes()
    assert plan.byte_unshuffle(want, typesize).tobytes() == block.tobytes()


@pytest.mark.parametrize("typesize", [1, 2, 4, 8])
def test_bit_shuffle_matches_blosc_streams(typesize):
    """Blosc's stored shuffled bytes (one stream per block, no split) equal bit_shuffle()."""
    nelem = 4096
    arr = np.frombuffer(_data(nelem, typesize), f"u{typesize}")
    enc = Blosc(cname="zstd", shuffle=Blosc.BITSHUFFLE, blocksize=arr.nbytes).encode(arr)
    f = blosc_frames.parse_frame(enc)
    shuffled = bytearray()
    for s in f.streams:
        src = enc[s["src_offset"] : s["src_offset"] + s["src_size"]]
        shuffled += src if s["stored"] else decode_stream("zstd", bytes(src), int(s["dst_size"]))
    assert plan.bit_shuffle(arr.view(np.uint8), typesize).tobytes() == bytes(shuffled)
    assert plan.bit_unshuffle(np.frombuffer(bytes(shuffled), np.uint8), typesize).tobytes() == (
        arr.tobytes()
    )


def test_bit_unshuffle_leaves_blocks_of_non_multiple_of_8_elements():
    block = np.arange(24 * 4, dtype=np.uint8) * 3
    assert plan.bit_unshuffle(block[: 13 * 4], 4).tobytes() == block[: 13 * 4].tobytes()
    x = block[: 16 * 4]
    assert plan.bit_unshuffle(plan.bit_shuffle(x, 4), 4).tobytes() == x.tobytes()
    assert plan.bit_shuffle(x, 4).tobytes() != x.tobytes()


@pytest.mark.parametrize("dtype", ["<u2", "<i4", "<f8", "<c16"])
def test_byteswap_reference_matches_numpy(dtype):
    arr = np.frombuffer(_data(37, np.dtype(dtype).itemsize), dtype)
    swap = np.dtype(dtype).itemsize // (2 if np.dtype(dtype).kind == "c" else 1)
    got = plan.byteswap(arr.view(np.uint8), swap)
    assert got.tobytes() == arr.byteswap().tobytes()


# ---------------------------------------------------------------- raw streams


def _raw_inflate(data: bytes) -> bytes:
    d = zlib.decompressobj(-15)
    out = d.decompress(data) + d.flush()
    assert d.eof and not d.unused_data
    return out


@pytest.mark.parametrize("level", [1, 6, 9])
def test_zlib_stream_located_and_verified(level):
    payload = _data(50_000, 1)
    enc = numcodecs.Zlib(level=level).encode(payload)
    raw = streams.locate("zlib", enc, len(payload))
    assert raw.algorithm == "Deflate" and raw.offset == 2 and raw.length == len(enc) - 6
    body = bytes(enc[raw.offset : raw.offset + raw.length])
    decoded = _raw_inflate(body)
    assert decoded == payload
    streams.verify(raw, decoded)
    with pytest.raises(CorruptChunkError, match="Adler-32"):
        streams.verify(raw, decoded[:-1] + b"\x00")


def test_gzip_stream_numcodecs_and_optional_header_fields():
    payload = _data(30_000, 1)
    for enc in (numcodecs.GZip(level=5).encode(payload), gzip.compress(payload, mtime=0)):
        raw = streams.locate("gzip", enc, len(payload))
        decoded = _raw_inflate(bytes(enc[raw.offset : raw.offset + raw.length]))
        assert decoded == payload
        streams.verify(raw, decoded)
    body = zlib.compressobj(wbits=-15)
    deflated = body.compress(payload) + body.flush()
    # FEXTRA + FNAME + FCOMMENT + FHCRC, built by hand (RFC 1952)
    head = b"\x1f\x8b\x08" + bytes([4 | 8 | 16 | 2]) + b"\0\0\0\0\0\xff"
    head += struct.pack("<H", 5) + b"extra" + b"name.bin\0" + b"a comment\0"
    head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    blob = head + deflated + struct.pack("<II", zlib.crc32(payload), len(payload))
    assert gzip.decompress(blob) == payload  # the hand-built member is valid gzip
    raw = streams.locate("gzip", blob, len(payload))
    assert raw.offset == len(head)
    assert _raw_inflate(blob[raw.offset : raw.offset + raw.length]) == payload
    bad = bytearray(blob)
    bad[len(head) - 1] ^= 0xFF
    with pytest.raises(CorruptChunkError, match="header CRC"):
        streams.locate("gzip", bytes(bad))
    with pytest.raises(CorruptChunkError, match="CRC-32"):
        streams.verify(raw, payload[:-1] + b"?")


def test_lz4_stream_prefix_stripped():
    payload = _data(70_000, 1)
    enc = numcodecs.LZ4().encode(payload)
    raw = streams.locate("lz4", enc, len(payload))
    assert raw.offset == 4 and raw.decoded_size == len(payload)
    assert lz4_block_decode(bytes(enc[4:]), len(payload)) == payload
    with pytest.raises(CorruptChunkError, match="declares"):
        streams.locate("lz4", enc, len(payload) + 1)


@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_frames(checksum):
    payload = _data(100_000, 1)
    enc = numcodecs.Zstd(level=3, checksum=checksum).encode(payload)
    raw = streams.locate("zstd", enc, len(payload))
    assert (raw.offset, raw.length) == (0, len(enc))
    assert raw.decoded_size == len(payload) and raw.zstd_checksum is checksum
    assert zstandard.ZstdDecompressor().decompress(bytes(enc)) == payload
    nosize = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert streams.locate("zstd", nosize, len(payload)).decoded_size is None
    with pytest.raises(CorruptChunkError, match="magic"):
        streams.locate("zstd", b"\0" * 16)
    with pytest.raises(CorruptChunkError, match="declares"):
        streams.locate("zstd", enc, 5)
    # Fewer bytes than the chunk: perhaps the first of several frames, left to the CPU.
    with pytest.raises(UnsupportedError, match="several frames"):
        streams.locate("zstd", enc, 2 * len(payload))
    # A skippable frame first (numcodecs reads past it; nvCOMP starts at a frame): the CPU's.
    for magic in (0x184D2A50, 0x184D2A5F):
        skip = struct.pack("<II", magic, 3) + b"abc"
        assert numcodecs.Zstd().decode(skip + bytes(enc)) == payload
        with pytest.raises(UnsupportedError, match="skippable"):
            streams.locate("zstd", skip + bytes(enc), len(payload))
    with pytest.raises(CorruptChunkError, match="magic"):
        streams.locate("zstd", struct.pack("<II", 0x184D2A60, 3) + b"abc" + bytes(enc))


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        ("zlib", b"\x78\x9d" + b"\0" * 8, "check bits"),
        ("zlib", b"\x79\x9c" + b"\0" * 8, "not deflate"),
        ("zlib", b"\x78", "shorter"),
        ("gzip", b"\x1f\x8c" + b"\0" * 20, "magic"),
        ("gzip", b"\x1f\x8b\x08\x20" + b"\0" * 20, "reserved"),
        ("gzip", b"\x1f\x8b\x08\x08" + b"\0" * 6 + b"noterminator" + b"\0" * 0, "unterminated"),
        ("lz4", b"\x01", "shorter"),
    ],
)
def test_corrupt_wrappers(name, data, match):
    with pytest.raises(CorruptChunkError, match=match):
        streams.locate(name, data)


def test_unsupported_wrappers():
    with pytest.raises(UnsupportedError):
        streams.locate("bz2", b"")
    with pytest.raises(UnsupportedError, match="dictionary"):
        streams.locate("zlib", b"\x78\xbb" + b"\0" * 8)


@pytest.mark.parametrize("name", ["zlib", "gzip", "lz4", "zstd"])
def test_wrap_builds_chunks_numcodecs_reads(name):
    payload = _data(40_000, 1)
    if name in ("zlib", "gzip"):
        c = zlib.compressobj(wbits=-15)
        raw = c.compress(payload) + c.flush()
    elif name == "lz4":
        raw = bytes(numcodecs.LZ4().encode(payload))[4:]
    else:
        raw = zstandard.ZstdCompressor().compress(payload)
    blob = streams.wrap(name, raw, payload, len(payload))
    codec = numcodecs.get_codec({"id": name})
    assert bytes(codec.decode(blob)) == payload
    loc = streams.locate(name, blob, len(payload))
    assert blob[loc.offset : loc.offset + loc.length] == raw


# ---------------------------------------------------------------- waves and packing


def test_make_waves_bounds_and_cover():
    rng = np.random.default_rng(3)
    sizes = [*rng.integers(0, 100, 500).tolist(), 1000, 5]
    waves = plan.make_waves(sizes, max_bytes=300, max_count=7)
    assert [i for w in waves for i in w] == list(range(len(sizes)))
    for w in waves:
        assert 1 <= len(w) <= 7
        total = sum(sizes[i] for i in w)
        assert total <= 300 or len(w) == 1
    # greedy: merging any wave with the next would break a bound
    for a, b in itertools.pairwise(waves):
        merged = [*a, b[0]]
        assert len(merged) > 7 or sum(sizes[i] for i in merged) > 300
    assert plan.make_waves([], max_bytes=1, max_count=1) == []
    with pytest.raises(ValueError):
        plan.make_waves([1], max_bytes=0, max_count=1)


def test_layout_aligns_each_part_and_one_window_preserves_them():
    parts = [b"abc", b"", bytes(range(17)), np.arange(5, dtype=np.uint8)]
    sizes = [memoryview(p).nbytes for p in parts]
    offsets, total = plan.layout(sizes, align=8)
    assert offsets.tolist() == [0, 8, 8, 32] and total == 40
    out = np.zeros(total, np.uint8)
    plan.pack_window(parts, offsets.tolist(), 0, out)
    for p, off, size in zip(parts, offsets.tolist(), sizes, strict=True):
        assert out[off : off + size].tobytes() == bytes(memoryview(p))
    assert plan.layout([], align=8)[1] == 0


@pytest.mark.parametrize("window", [1, 7, 16, 100, 4096])
@pytest.mark.parametrize("leads", [False, True])
def test_packing_window_by_window_puts_every_part_at_its_offset(window, leads):
    rng = np.random.default_rng(window + leads)
    sizes = rng.integers(0, 300, 25)
    sizes[3] = 0
    parts = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in sizes]
    lead = [int(x) for x in rng.integers(0, 16, len(parts))] if leads else [0] * len(parts)
    offsets, total = plan.layout([len(p) for p in parts], align=16, leads=lead if leads else None)
    ends = [off + len(p) for off, p in zip(offsets.tolist(), parts, strict=True)]
    # Each part's lead byte 16-byte aligned, parts in order without overlap, all inside.
    assert all((off + d) % 16 == 0 for off, d in zip(offsets.tolist(), lead, strict=True))
    assert all(e <= nxt for e, nxt in zip(ends, offsets.tolist()[1:], strict=False))
    assert ends[-1] <= total and total % 16 == 0
    got = np.zeros(total, np.uint8)
    want = np.zeros(total, np.uint8)
    for p, off in zip(parts, offsets.tolist(), strict=True):
        want[off : off + len(p)] = np.frombuffer(p, np.uint8)  # pads stay 0 in both
    stage = np.full(window, 0xEE, np.uint8)
    for lo in range(0, total, window):
        view = stage[: min(window, total - lo)]
        view[...] = 0  # pads are left as they are: zero them as `want` has them
        plan.pack_window(parts, offsets.tolist(), lo, view)
        got[lo : lo + view.size] = view
    assert got.tobytes() == want.tobytes()


# ---------------------------------------------------------------- chain classification


def _chunk_files(path, key):
    return (path / key).read_bytes()


def _emulate_gpu_decode(chain: plan.GpuChain, blob: bytes, shape, dtype) -> np.ndarray:
    """Run a GpuChain's steps on the CPU: crc strip, stream decode, swap, reshape, transpose."""
    data = blob
    for _ in range(chain.crc32c):
        data = data[:-4]
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if chain.compressor == "blosc":
        f = blosc_frames.parse_frame(data, nbytes)
        flat = blosc_frames.reassemble(f, data, decode_stream)
    elif chain.compressor is not None:
        raw = streams.locate(chain.compressor, data, nbytes)
        body = data[raw.offset : raw.offset + raw.length]
        if raw.algorithm == "Deflate":
            out = _raw_inflate(body)
        elif raw.algorithm == "LZ4":
            out = lz4_block_decode(body, nbytes)
        else:
            out = zstandard.ZstdDecompressor().decompress(body, max_output_size=nbytes)
        streams.verify(raw, out)
        flat = np.frombuffer(out, np.uint8)
    else:
        flat = np.frombuffer(data, np.uint8)
    if chain.swap_itemsize:
        flat = plan.byteswap(flat, chain.swap_itemsize)
    arr = flat.view(dtype).reshape(chain.stored_shape)
    return arr.transpose(chain.axes) if chain.axes is not None else arr


V3_CASES = {
    "zstd": dict(compressors=[zarr.codecs.ZstdCodec(level=3, checksum=True)]),
    "gzip": dict(compressors=[zarr.codecs.GzipCodec(level=4)]),
    "blosc": dict(compressors=[zarr.codecs.BloscCodec(cname="zstd", shuffle="shuffle")]),
    "blosc-bit": dict(compressors=[zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")]),
    "zstd-crc": dict(compressors=[zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()]),
    "big-endian": dict(
        serializer=zarr.codecs.BytesCodec(endian="big"), compressors=[zarr.codecs.ZstdCodec()]
    ),
    "transpose": dict(
        filters=[zarr.codecs.TransposeCodec(order=(2, 0, 1))], compressors=[zarr.codecs.GzipCodec()]
    ),
    "transpose2": dict(
        filters=[
            zarr.codecs.TransposeCodec(order=(1, 2, 0)),
            zarr.codecs.TransposeCodec(order=(2, 0, 1)),
        ],
        serializer=zarr.codecs.BytesCodec(endian="big"),
        compressors=None,
    ),
    "raw": dict(compressors=None),
}


@pytest.mark.parametrize("case", sorted(V3_CASES))
@pytest.mark.parametrize("dtype", ["<i2", "<f4", "<c8", "|u1"])
def test_classify_v3_chains_and_emulate(tmp_path, case, dtype):
    dtype = np.dtype(dtype)
    shape, chunks = (6, 10, 14), (4, 5, 7)
    z = zarr.create_array(tmp_path / "a", shape=shape, chunks=chunks, dtype=dtype, **V3_CASES[case])
    data = (np.arange(np.prod(shape)) % 97).astype(dtype).reshape(shape)
    z[...] = data
    a = cuzarr.open(tmp_path / "a")
    chain = plan.classify_chain(a._engine.codec)
    assert chain.gpu_decode, chain.cpu_reason
    assert chain.crc32c == (1 if case == "zstd-crc" else 0)
    blob = (tmp_path / "a" / "c" / "0" / "1" / "1").read_bytes()
    got = _emulate_gpu_decode(chain, blob, chunks, dtype)
    np.testing.assert_array_equal(got, data[0:4, 5:10, 7:14])


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("compressor", [None, "zlib", "lz4", "zstd", "blosc"])
def test_classify_v2_chains_and_emulate(tmp_path, order, compressor):
    comp = None if compressor is None else numcodecs.get_codec({"id": compressor})
    z = zarr.create_array(
        tmp_path / "a",
        shape=(9, 11),
        chunks=(4, 6),
        dtype="<i4",
        zarr_format=2,
        order=order,
        compressors=comp,
    )
    data = np.arange(99, dtype="<i4").reshape(9, 11) * 7
    z[...] = data
    chain = plan.classify_chain(cuzarr.open(tmp_path / "a")._engine.codec)
    assert chain.gpu_decode and chain.compressor == compressor
    got = _emulate_gpu_decode(chain, (tmp_path / "a" / "1.1").read_bytes(), (4, 6), np.dtype("<i4"))
    np.testing.assert_array_equal(got, _padded(data, 4, 6))


def _padded(data, r, c):
    out = np.zeros((4, 6), data.dtype)
    part = data[r : r + 4, c : c + 6]
    out[: part.shape[0], : part.shape[1]] = part
    return out


def test_classify_cpu_reasons(tmp_path):
    z = zarr.create_array(
        tmp_path / "d",
        shape=(8,),
        chunks=(4,),
        dtype="<i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="<i4")],
    )
    z[...] = 1
    assert "filters" in plan.classify_chain(cuzarr.open(tmp_path / "d")._engine.codec).cpu_reason
    z = zarr.create_array(
        tmp_path / "b",
        shape=(8,),
        chunks=(4,),
        dtype="<i4",
        zarr_format=2,
        compressors=numcodecs.BZ2(),
    )
    assert "bz2" in plan.classify_chain(cuzarr.open(tmp_path / "b")._engine.codec).cpu_reason
    z = zarr.create_array(tmp_path / "s", shape=(8,), chunks=(4,), dtype="<U3")
    assert plan.classify_chain(cuzarr.open(tmp_path / "s")._engine.codec).cpu_reason


# ---------------------------------------------------------------- scatter descriptors


@pytest.mark.parametrize(
    "selection",
    [
        (slice(None), slice(None), slice(None)),
        (slice(3, 17), slice(2, 9), slice(1, 20, 3)),
        (slice(None, None, 2), slice(5, 6), slice(None)),
        (slice(11, 12), slice(None), slice(4, 19)),
    ],
)
def test_scatter_descriptors_from_engine_requests(tmp_path, selection):
    """Scatter rows built from the engine's own requests reproduce the CPU read."""
    shape, chunks = (20, 12, 21), (6, 5, 8)
    z = zarr.create_array(tmp_path / "a", shape=shape, chunks=chunks, dtype="<i8")
    data = np.arange(np.prod(shape), dtype="<i8").reshape(shape)
    z[...] = data
    a = cuzarr.open(tmp_path / "a")
    bp = a._indexer.basic(selection)
    out = np.zeros(bp.shape, "<i8")
    out_strides = tuple(s // 8 for s in out.strides)
    chunk_list = []
    rows = []
    base = 0
    for req in bp.requests:
        coords = tuple(int(c) for c in req.key.split("/")[1:])
        chunk = a.read_chunk(coords)
        full = np.zeros(chunks, "<i8")
        full[tuple(slice(0, n) for n in chunk.shape)] = chunk
        row = plan.scatter_descriptor(req, chunks, out.shape, out_strides, src_base=base)
        assert row is not None
        rows.append(row)
        chunk_list.append(full.reshape(-1))
        base += full.size
    table = np.concatenate(rows)
    assert table.view("<i8").reshape(-1, 27).shape[0] == len(rows)  # the kernel's row layout
    plan.scatter_reference(np.concatenate(chunk_list), out.reshape(-1), table)
    np.testing.assert_array_equal(out, a[selection])


def test_scatter_descriptor_refuses_non_boxes():
    req = ChunkRequest(
        key="c/0", chunk_selection=(np.array([1, 2]),), out_selection=(slice(0, 2),), complete=False
    )
    assert plan.scatter_descriptor(req, (4,), (2,), (1,)) is None
    req = ChunkRequest(
        key="c/0", chunk_selection=(slice(0, 3),), out_selection=(slice(0, 2),), complete=False
    )
    assert plan.scatter_descriptor(req, (4,), (2,), (1,)) is None


# ---------------------------------------------------------------- kernels


def test_kernel_sources_compile_as_cpp():
    """The CUDA sources parse as C++ with the CUDA qualifiers and built-ins stubbed out."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler to syntax-check the kernel sources")
    from cuzarr.gpu.kernels import KERNEL_NAMES, SOURCE

    prelude = (
        "#define __global__\n#define __device__\n#define __forceinline__ inline\n"
        "struct dim3_ { unsigned x, y, z; };\n"
        "extern dim3_ blockIdx, blockDim, threadIdx, gridDim;\n"
        "unsigned atomicXor(unsigned* address, unsigned value);\n"
    )
    proc = subprocess.run(
        [cxx, "-fsyntax-only", "-Wall", "-x", "c++", "-"],
        input=prelude + SOURCE,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for name in KERNEL_NAMES:
        assert f'extern "C" __global__ void {name}(' in SOURCE


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_kernel_sources_compile_with_nvcc(tmp_path, arch):
    """nvcc compiles the kernels to a cubin, every warning an error, and exports each by name."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (the CUDA toolkit) is not on PATH")
    from cuzarr.gpu.kernels import KERNEL_NAMES, SOURCE

    src = tmp_path / "kernels.cu"
    src.write_text(SOURCE)
    cubin = tmp_path / f"kernels-{arch}.cubin"
    proc = subprocess.run(
        [nvcc, "-cubin", f"-arch={arch}", "--std=c++14", "-Werror", "all-warnings",
         "-o", str(cubin), str(src)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert cubin.stat().st_size > 0
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is not None:
        listing = subprocess.run(
            [cuobjdump, "-symbols", str(cubin)], capture_output=True, text=True, check=True
        ).stdout
        for name in KERNEL_NAMES:
            assert name in listing, f"{name} missing from the {arch} cubin"


# ---------------------------------------------------------------- devices and imports

GPU_MODULES = (
    "cupy",
    "nvidia.nvcomp",
    "kvikio",
    "cuzarr.gpu.backend",
    "cuzarr.gpu.device",
    "cuzarr.gpu.files",
)


def test_import_cuzarr_and_cpu_paths_import_no_gpu_package(tmp_path):
    script = f"""
import sys, numpy as np, zarr, cuzarr
a = cuzarr.create({str(tmp_path / "x")!r}, shape=(8, 8), chunks=(4, 4), dtype="f4")
a[...] = 1.5
assert float(cuzarr.open({str(tmp_path / "x")!r})[1, 1]) == 1.5
with cuzarr.configure(device="cpu", strict=True):
    z = zarr.open_array({str(tmp_path / "x")!r})
    z[:2] = 2.0
    assert float(z[0, 0]) == 2.0
with cuzarr.configure(device="auto"):
    zarr.open_array({str(tmp_path / "x")!r})[...]
import cuzarr.gpu.plan, cuzarr.gpu.streams, cuzarr.gpu.blosc_frames, cuzarr.gpu.kernels
import cuzarr.codecs.gpu_only
bad = [m for m in {GPU_MODULES!r} if m in sys.modules]
print("LOADED", bad)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


@pytest.mark.skipif(cuzarr.backends.gpu_status() is None, reason="a GPU is usable here")
def test_device_gpu_without_gpu_names_missing_parts_and_extras(tmp_path):
    status = cuzarr.backends.gpu_status()
    assert "cuzarr[cu12]" in status and "cuzarr[cu13]" in status
    from cuzarr.backends.probe import missing_components

    for part in missing_components():
        assert part in status
    with pytest.raises(UnsupportedError, match=r"device='gpu'.*cuzarr\[cu1"):
        cuzarr.configure(device="gpu")
    assert cuzarr.get_settings().device is not cuzarr.Device.GPU
    a = cuzarr.create(tmp_path / "x", shape=(4,), chunks=(2,), dtype="i2")
    with pytest.raises(UnsupportedError, match="CuPy"):
        cuzarr.open(tmp_path / "x", device="gpu")
    b = cuzarr.open(tmp_path / "x", device="auto")
    a[...] = 3
    assert isinstance(b[...], np.ndarray) and b[...].tolist() == [3, 3, 3, 3]


def test_missing_components_lists_what_is_absent(monkeypatch):
    from cuzarr.backends import probe

    monkeypatch.setattr(probe, "_has_driver", lambda: False)
    monkeypatch.setattr(probe, "_find", lambda m: None if m == "kvikio" else object())
    assert probe.missing_components() == ["CUDA driver (libcuda.so.1)", "kvikio"]
    monkeypatch.setattr(probe, "_has_driver", lambda: True)
    monkeypatch.setattr(probe, "_find", lambda m: object())
    assert probe.missing_components() == []


# ---------------------------------------------------------------- GPU-only codecs


def _gpu_only_array(tmp_path, name):
    root = tmp_path / "g"
    root.mkdir()
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [8],
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": name, "configuration": {}},
        ],
    }
    (root / "zarr.json").write_text(json.dumps(meta))
    (root / "c").mkdir()
    (root / "c" / "0").write_bytes(b"not an nvcomp chunk, would be garbage if decoded" * 2)
    return root


@pytest.mark.skipif(cuzarr.backends.gpu_status() is None, reason="a GPU is usable here")
@pytest.mark.parametrize(
    "name", ["cuzarr.ans", "cuzarr.bitcomp", "cuzarr.cascaded", "cuzarr.gdeflate"]
)
def test_gpu_only_codecs_refuse_without_gpu(tmp_path, name):
    root = _gpu_only_array(tmp_path, name)
    z = zarr.open_array(root, mode="r")  # zarr's default pipeline, codec from the registry
    with pytest.raises(UnsupportedError, match=f"codec '{name}'.*only a GPU can read"):
        z[...]
    with pytest.raises(UnsupportedError):
        cuzarr.open(root)[...]
    with cuzarr.configure(strict=False), pytest.raises(UnsupportedError, match="only a GPU"):
        zarr.open_array(root, mode="r")[...]
    # a missing chunk is still fill (no decode needed)
    assert zarr.open_array(root, mode="r")[4:].tolist() == [0, 0, 0, 0]


def test_gpu_only_codec_metadata():
    from zarr.registry import get_codec_class

    from cuzarr.codecs.gpu_only import GPU_ONLY_CODECS

    for name, cls in GPU_ONLY_CODECS.items():
        assert get_codec_class(name) is cls
        assert cls.from_dict({"name": name}).to_dict() == {"name": name, "configuration": {}}
    c = get_codec_class("cuzarr.cascaded").from_dict(
        {"name": "cuzarr.cascaded", "configuration": {"data_type": "<i4"}}
    )
    assert c.to_dict()["configuration"] == {"data_type": "<i4"}
    with pytest.raises(cuzarr.MetadataError, match="unknown field 'level'"):
        get_codec_class("cuzarr.ans").from_dict(
            {"name": "cuzarr.ans", "configuration": {"level": 3}}
        )
    with pytest.raises(cuzarr.MetadataError, match="algorithm_type"):
        get_codec_class("cuzarr.gdeflate").from_dict(
            {"name": "cuzarr.gdeflate", "configuration": {"algorithm_type": 7}}
        )


def test_cuzarr_device_gpu_without_a_gpu_keeps_zarr_on_numpy_or_raises_in_strict(
    tmp_path, monkeypatch, caplog
):
    """CUZARR_DEVICE=gpu alone switches zarr to GPU buffers only where a GPU is usable."""
    import zarr

    from cuzarr import config
    from cuzarr.backends import gpu_status

    if gpu_status() is None:
        pytest.skip("a GPU is usable here")
    z = zarr.create_array(tmp_path / "a", shape=(8,), chunks=(4,), dtype="<i2")
    z[...] = np.arange(8, dtype="<i2")
    saved = {k: zarr.config.get(k) for k in ("buffer", "ndbuffer")}
    from cuzarr import diagnostics

    # The warning is logged once per process: forget an earlier one.
    for message in [m for m in diagnostics._logged if m.startswith("CUZARR_DEVICE")]:
        diagnostics._logged.discard(message)
    monkeypatch.setenv("CUZARR_DEVICE", "gpu")
    try:
        for strict in ("0", "1"):
            monkeypatch.setenv("CUZARR_STRICT", strict)
            config._set_settings(None)  # settings from the environment again
            with zarr.config.set({"codec_pipeline.path": "cuzarr.Pipeline"}):
                a = zarr.open_array(tmp_path / "a", mode="r")
                if strict == "0":
                    with caplog.at_level("WARNING", logger="cuzarr"):
                        got = a[...]
                    assert isinstance(got, np.ndarray)
                    np.testing.assert_array_equal(got, np.arange(8))
                    assert "CUZARR_DEVICE=gpu, but" in caplog.text
                else:
                    with pytest.raises(UnsupportedError, match="CUZARR_DEVICE=gpu, but"):
                        a[...]
            assert {k: zarr.config.get(k) for k in saved} == saved
    finally:
        monkeypatch.delenv("CUZARR_DEVICE")
        monkeypatch.delenv("CUZARR_STRICT")
        config._set_settings(None)


def test_streams_located_from_first_and_last_bytes_only():
    """locate_parts on a head and a tail equals locate on the whole chunk; short heads refuse."""
    payload = bytes(range(256)) * 40
    for name, blob in (
        ("gzip", gzip.compress(payload, mtime=0)),
        ("zlib", zlib.compress(payload)),
        ("lz4", bytes(nc_lz4.LZ4().encode(payload))),
        ("zstd", zstandard.ZstdCompressor().compress(payload)),
    ):
        whole = streams.locate(name, blob, len(payload))
        part = streams.locate_parts(name, blob[:32], blob[-16:], len(blob), len(payload))
        assert part == whole
        assert streams.prefix_length(name, blob[:32], len(blob)) == whole.offset
    # A gzip header with a file name longer than the head: not enough bytes at hand.
    named = bytearray(gzip.compress(payload, mtime=0))
    named[3] |= 0x08
    named[10:10] = b"n" * 100 + b"\0"
    with pytest.raises(UnsupportedError, match="at hand"):
        streams.prefix_length("gzip", bytes(named[:32]), len(named))
    assert streams.prefix_length("gzip", bytes(named), len(named)) == 111
    with pytest.raises(UnsupportedError, match="trailer"):
        streams.locate_parts("gzip", named[:200], named[-4:], len(named))
    with pytest.raises(UnsupportedError, match="no raw-stream"):
        streams.prefix_length("bz2", b"BZh9", 4)
