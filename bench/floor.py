"""The codec floor: every chunk of a dataset decoded (encoded) in memory with cuzarr's libraries."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from bench.cells import Mismatch, cell_record, check_equal, finish_cell, timed
from bench.datasets import Dataset
from bench.matrix import FLOOR


def _numcodec(ds: Dataset) -> Any:
    from numcodecs import Blosc, Zstd

    if ds.codec == "zstd":
        return Zstd(level=3)
    if ds.codec == "blosc":
        return Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)
    if ds.codec == "blosc-lz4":
        return Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    return None


def _stored_chunks(ds: Dataset, path: Path) -> list[memoryview]:
    """Every encoded (inner) chunk of ``ds``'s array, loaded into memory, in grid order."""
    chunks: list[memoryview] = []
    if ds.shards is None:
        for region in ds.chunk_regions():
            idx = [r.start // c for r, c in zip(region, ds.chunks, strict=True)]
            chunks.append(memoryview((path / "c").joinpath(*map(str, idx)).read_bytes()))
        return chunks
    per = [s // c for s, c in zip(ds.shards, ds.chunks, strict=True)]
    n = math.prod(per)
    grid = [-(-s // h) for s, h in zip(ds.shape, ds.shards, strict=True)]
    by_coord: dict[tuple[int, ...], memoryview] = {}
    for shard in itertools.product(*map(range, grid)):
        raw = memoryview((path / "c").joinpath(*map(str, shard)).read_bytes())
        index = np.frombuffer(raw[len(raw) - 16 * n - 4 : len(raw) - 4], "<u8").reshape(n, 2)
        for k, inner in enumerate(itertools.product(*map(range, per))):
            off, nb = (int(v) for v in index[k])
            coord = tuple(s * p + i for s, p, i in zip(shard, per, inner, strict=True))
            by_coord[coord] = raw[off : off + nb]
    chunks += [
        by_coord[tuple(r.start // c for r, c in zip(region, ds.chunks, strict=True))]
        for region in ds.chunk_regions()
    ]
    return chunks


def _split(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    step = -(-len(items) // parts)
    return [items[i : i + step] for i in range(0, len(items), step)]


def measure_floor(
    ds: Dataset, workload: str, *, data_dir: Path, repeats: int, threads: int
) -> dict[str, Any]:
    """Decode (read_all) or encode (write_all) every chunk held in memory: the codec floor.

    Decoding writes each chunk into a per-thread scratch buffer with the decoder library cuzarr
    uses (for zstd numcodecs' libzstd in one call for chunks of 64 KiB or more, python-zstandard
    for smaller ones; numcodecs otherwise); encoding starts from contiguous
    chunk arrays prepared beforehand, zstd with python-zstandard (cuzarr's default encoder).
    Uncompressed: a copy.
    Verified in a separate, untimed pass.
    """
    cell = cell_record(FLOOR, threads, ds, workload)
    cell["pipeline"] = "zstandard" if ds.codec == "zstd" else "numcodecs"  # see encode_part
    expected = ds.expected(data_dir)
    codec = _numcodec(ds)
    chunk_nbytes = math.prod(ds.chunks) * np.dtype(ds.dtype).itemsize
    regions = list(ds.chunk_regions())
    cell["nbytes"], cell["calls"] = ds.nbytes, len(regions)
    pool = ThreadPoolExecutor(threads)
    times: list[float] = []
    try:
        if workload == "read_all":
            stored = _stored_chunks(ds, data_dir / f"{ds.key}.zarr")

            # The same decoder library cuzarr uses: for zstd, numcodecs' libzstd in one call
            # for chunks of ZSTD_ONE_CALL_MIN bytes or more (zstd_batch.decode_into, where the
            # batch helper is built), else python-zstandard (a reused context per thread);
            # numcodecs for the others.
            from cuzarr.codecs import zstd_batch
            from cuzarr.codecs.numcodecs_ import ZSTD_ONE_CALL_MIN

            zstd = codec is not None and codec.codec_id == "zstd"
            one_call = zstd and chunk_nbytes >= ZSTD_ONE_CALL_MIN and zstd_batch.available()
            if one_call:
                cell["pipeline"] = "numcodecs-libzstd"

            def decode_part(part: Sequence[memoryview]) -> None:
                scratch = np.empty(chunk_nbytes, np.uint8)
                if one_call:
                    for buf in part:
                        if not zstd_batch.decode_into(np.frombuffer(buf, np.uint8), scratch):
                            raise Mismatch("floor decode: a stored chunk did not decode")
                    return
                if zstd:
                    dctx = zstandard.ZstdDecompressor()
                    for buf in part:
                        with dctx.stream_reader(buf) as reader:
                            reader.readinto(scratch)
                    return
                for buf in part:
                    if codec is None:
                        scratch[:] = np.frombuffer(buf, np.uint8)
                    else:
                        codec.decode(buf, out=scratch)

            parts = _split(stored, threads)
            for _ in range(repeats):
                t, _ = timed(lambda: list(pool.map(decode_part, parts)))
                times.append(t)
            for r, buf in zip(regions, stored, strict=True):
                raw = bytes(buf) if codec is None else codec.decode(buf)
                got = np.frombuffer(raw, ds.dtype).reshape(ds.chunks)
                check_equal(
                    got[tuple(slice(0, s.stop - s.start) for s in r)], expected[r], "floor decode"
                )
        elif workload == "write_all":
            arrays = []
            for r in regions:
                a = np.zeros(ds.chunks, ds.dtype)
                a[tuple(slice(0, s.stop - s.start) for s in r)] = expected[r]
                arrays.append(a)

            # cuzarr compresses zstd with python-zstandard (Settings.zstd_encoder's default: a
            # reused context per thread), other codecs with numcodecs.
            zstd = codec is not None and codec.codec_id == "zstd"

            def encode_part(part: Sequence[np.ndarray]) -> list[Any]:
                if codec is None:
                    return [a.tobytes() for a in part]
                if zstd:
                    cctx = zstandard.ZstdCompressor(level=codec.level)
                    return [cctx.compress(a) for a in part]
                return [codec.encode(a) for a in part]

            parts = _split(arrays, threads)
            encoded: list[Any] = []
            for _ in range(repeats):
                del encoded
                t, res = timed(lambda: list(pool.map(encode_part, parts)))
                encoded = [e for p in res for e in p]
                times.append(t)
            for a, enc in zip(arrays, encoded, strict=True):
                raw = enc if codec is None else codec.decode(enc)
                check_equal(np.frombuffer(raw, ds.dtype).reshape(ds.chunks), a, "floor encode")
        else:
            raise ValueError(f"the floor has no workload {workload!r}")
    except Mismatch as exc:
        cell["error"] = f"WRONG DATA: {exc}"
        return cell
    except Exception as exc:
        cell["error"] = f"failed: {type(exc).__name__}: {exc}"
        return cell
    finally:
        pool.shutdown()
    return finish_cell(cell, times)
