"""Answer the open nvCOMP/kvikio/CuPy API questions on a GPU; one JSON of findings.

Each probe is tagged as in cuzarr/gpu/device.py's docstring; a probe that raises records the
exception instead of stopping the others. Usage: ``python3 probe_api.py OUT.json``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import cupy as cp
import numcodecs
import numpy as np
from nvidia import nvcomp

RESULTS: dict[str, Any] = {}


def probe(tag: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
        t0 = time.perf_counter()
        try:
            RESULTS[tag] = {"ok": True, "result": fn()}
        except Exception as exc:
            RESULTS[tag] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=3),
            }
        RESULTS[tag]["seconds"] = round(time.perf_counter() - t0, 4)
        print(tag, "OK" if RESULTS[tag]["ok"] else "FAIL", RESULTS[tag].get("error", ""))
        return fn

    return wrap


PAYLOAD = (
    (np.arange(1 << 20) // 7 % 251).astype(np.uint8)
    + np.random.default_rng(0).integers(0, 3, 1 << 20, dtype=np.uint8)
).tobytes()


def dev(b: bytes) -> Any:
    return cp.asarray(np.frombuffer(b, np.uint8))


def raw_codec(algo: str) -> Any:
    return nvcomp.Codec(algorithm=algo, bitstream_kind=nvcomp.BitstreamKind.RAW)


def decoded_bytes(x: Any) -> bytes:
    return bytes(cp.asnumpy(cp.asarray(x).view(cp.uint8).reshape(-1)))


@probe("versions")
def _versions() -> Any:
    import kvikio

    return {
        "nvcomp": nvcomp.__version__,
        "nvcomp_cuda": getattr(nvcomp, "__cuda_version__", None),
        "cupy": cp.__version__,
        "kvikio": getattr(kvikio, "__version__", None),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "driver": cp.cuda.runtime.driverGetVersion(),
        "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
    }


@probe("as-array")
def _as_array() -> Any:
    enc = numcodecs.Zstd(level=3).encode(PAYLOAD)
    out = raw_codec("Zstd").decode(nvcomp.as_array(dev(enc)))
    view = cp.asarray(out)
    return {
        "type": type(out).__name__,
        "cupy_dtype": str(view.dtype),
        "shape": view.shape,
        "equal": decoded_bytes(out) == PAYLOAD,
    }


@probe("decode-list")
def _decode_list() -> Any:
    encs = [numcodecs.Zstd(level=3).encode(PAYLOAD[i::3]) for i in range(3)]
    codec = raw_codec("Zstd")
    res: dict[str, Any] = {}
    try:
        outs = codec.decode([nvcomp.as_array(dev(e)) for e in encs])
        res["list"] = [decoded_bytes(o) == PAYLOAD[i::3] for i, o in enumerate(outs)]
    except Exception as exc:
        res["list_error"] = f"{type(exc).__name__}: {exc}"
    try:
        outs = codec.decode(nvcomp.as_arrays([nvcomp.as_array(dev(e)) for e in encs]))
        res["as_arrays"] = [decoded_bytes(o) == PAYLOAD[i::3] for i, o in enumerate(outs)]
        res["as_arrays_type"] = type(outs).__name__
    except Exception as exc:
        res["as_arrays_error"] = f"{type(exc).__name__}: {exc}"
    return res


@probe("host-buffers")
def _host() -> Any:
    enc = numcodecs.Zstd(level=3).encode(PAYLOAD)
    out = raw_codec("Zstd").decode(nvcomp.as_array(np.frombuffer(enc, np.uint8)))
    return {"equal": decoded_bytes(out) == PAYLOAD}


@probe("raw-zstd-checksum")
def _zstd_checksum() -> Any:
    enc = numcodecs.Zstd(level=3, checksum=True).encode(PAYLOAD)
    return {"equal": decoded_bytes(raw_codec("Zstd").decode(nvcomp.as_array(dev(enc)))) == PAYLOAD}


@probe("raw-zstd-nosize")
def _zstd_nosize() -> Any:
    import zstandard

    enc = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    return {"equal": decoded_bytes(raw_codec("Zstd").decode(nvcomp.as_array(dev(enc)))) == PAYLOAD}


@probe("raw-lz4")
def _lz4() -> Any:
    enc = bytes(numcodecs.LZ4().encode(PAYLOAD))
    assert struct.unpack("<i", enc[:4])[0] == len(PAYLOAD)
    out = raw_codec("LZ4").decode(nvcomp.as_array(dev(enc[4:])))
    return {"equal": decoded_bytes(out) == PAYLOAD}


@probe("raw-deflate")
def _deflate() -> Any:
    from cuzarr.gpu import streams

    res = {}
    for name in ("zlib", "gzip"):
        enc = bytes(numcodecs.get_codec({"id": name}).encode(PAYLOAD))
        loc = streams.locate(name, enc, len(PAYLOAD))
        out = raw_codec("Deflate").decode(
            nvcomp.as_array(dev(enc[loc.offset : loc.offset + loc.length]))
        )
        res[name] = decoded_bytes(out) == PAYLOAD
    return res


@probe("raw-encode")
def _encode() -> Any:
    import zstandard

    from cuzarr.gpu import streams

    res = {}
    for name, algo in (("zstd", "Zstd"), ("lz4", "LZ4"), ("zlib", "Deflate"), ("gzip", "Deflate")):
        raw = decoded_bytes(raw_codec(algo).encode(nvcomp.as_array(dev(PAYLOAD))))
        blob = streams.wrap(name, raw, PAYLOAD, len(PAYLOAD))
        res[name] = {
            "ratio": round(len(PAYLOAD) / len(blob), 3),
            "numcodecs_reads": bytes(numcodecs.get_codec({"id": name}).decode(blob)) == PAYLOAD,
        }
    res["zstd_zstandard_reads"] = (
        zstandard.ZstdDecompressor().decompress(
            decoded_bytes(raw_codec("Zstd").encode(nvcomp.as_array(dev(PAYLOAD)))),
            max_output_size=len(PAYLOAD),
        )
        == PAYLOAD
    )
    res["zlib_crc_ok"] = zlib.crc32(PAYLOAD) is not None
    return res


@probe("native")
def _native() -> Any:
    data = (np.arange(1 << 20, dtype="<i4") // 5).tobytes()
    res = {}
    for algo in ("ANS", "Bitcomp", "Cascaded", "GDeflate"):
        c = nvcomp.Codec(algorithm=algo, bitstream_kind=nvcomp.BitstreamKind.NVCOMP_NATIVE)
        enc = decoded_bytes(c.encode(nvcomp.as_array(dev(data))))
        c2 = nvcomp.Codec(algorithm=algo, bitstream_kind=nvcomp.BitstreamKind.NVCOMP_NATIVE)
        res[algo] = {
            "ratio": round(len(data) / len(enc), 3),
            "round_trip": decoded_bytes(c2.decode(nvcomp.as_array(dev(enc)))) == data,
        }
    return res


@probe("sync-free-config")
def _sync() -> Any:
    """[sync-free-config] A config built from sizes decodes CPU-written RAW streams, unsynced?"""
    encs = [numcodecs.Zstd(level=3).encode(PAYLOAD) for _ in range(64)]
    ins = nvcomp.as_arrays([nvcomp.as_array(dev(e)) for e in encs])
    codec = raw_codec("Zstd")
    res: dict[str, Any] = {}
    for label, config in (
        ("no_config", None),
        ("from_sizes", codec.decompression_config(codec.compression_config([len(PAYLOAD)] * 64))),
    ):
        codec.decode(ins, decompression_config=config)
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        outs = codec.decode(ins, decompression_config=config)
        t_call = time.perf_counter() - t0
        cp.cuda.Device().synchronize()
        t_sync = time.perf_counter() - t0
        res[label] = {
            "call_s": round(t_call, 5),
            "call_plus_sync_s": round(t_sync, 5),
            "returns_before_done": t_call < 0.5 * t_sync,
            "equal": all(decoded_bytes(outs[i]) == PAYLOAD for i in range(len(outs))),
        }
    return res


@probe("decode-out-sizes")
def _out_sizes() -> Any:
    """[decode-out-sizes] With out= (cuzarr's buffers), does buffer_sizes give decoded sizes?"""
    from cuzarr.gpu.device import decode_batch, upload

    parts = [PAYLOAD[: 1000 * (i + 1)] for i in range(4)]
    encs = [numcodecs.Zstd(level=3).encode(p) for p in parts]
    src, offsets, sizes = upload(encs)
    codec = raw_codec("Zstd")
    cap = [len(PAYLOAD)] * 4
    out = cp.empty(4 * len(PAYLOAD), cp.uint8)
    outs = nvcomp.as_arrays(out, [i * len(PAYLOAD) for i in range(4)], cap)
    got = codec.decode(nvcomp.as_arrays(src, offsets, sizes), out=outs).buffer_sizes
    buf, starts = decode_batch("Zstd", src, offsets, sizes, [len(p) for p in parts])
    ok = [bytes(cp.asnumpy(buf[s : s + len(p)])) == p for s, p in zip(starts, parts, strict=True)]
    return {"want": [len(p) for p in parts], "buffer_sizes": list(got), "decode_batch_equal": ok}


@probe("alignment")
def _alignment() -> Any:
    """Required buffer alignment per algorithm (cuzarr aligns every buffer to 16 bytes)."""
    return {
        algo: raw_codec(algo).get_required_decompression_alignment()
        for algo in ("Zstd", "LZ4", "Deflate", "Gzip", "Snappy")
    }


@probe("gzip-name")
def _gzip() -> Any:
    """Is "Gzip" an algorithm name, decoding whole gzip members?"""
    enc = bytes(numcodecs.GZip(level=5).encode(PAYLOAD))
    out = raw_codec("Gzip").decode(nvcomp.as_array(dev(enc)))
    return {"equal": decoded_bytes(out) == PAYLOAD}


@probe("kvikio")
def _kvikio() -> Any:
    import kvikio
    import kvikio.defaults

    from cuzarr.gpu.files import gdsinfo

    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR", "/tmp"), delete=False) as f:
        f.write(PAYLOAD)
        path = f.name
    buf = cp.empty(len(PAYLOAD), cp.uint8)
    with kvikio.CuFile(path, "r") as cf:
        n = cf.pread(buf, len(PAYLOAD), 0).get()
    os.unlink(path)
    return {"read": int(n), "equal": bytes(cp.asnumpy(buf)) == PAYLOAD, **gdsinfo()}


@probe("kernels")
def _kernels() -> Any:
    from cuzarr.gpu import launch, plan

    rng = np.random.default_rng(1)
    res = {}
    for ts in (2, 4, 8):
        blocks = [rng.integers(0, 256, n * ts, dtype=np.uint8) for n in (64, 128, 129, 1000)]
        for name, ref in (
            ("cuzarr_byte_unshuffle", plan.byte_unshuffle),
            ("cuzarr_bit_unshuffle", plan.bit_unshuffle),
        ):
            src = np.concatenate(blocks)
            sizes = np.array([b.size for b in blocks], np.int64)
            offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table = np.stack([offs, offs, sizes, np.full(len(sizes), ts)], axis=1).astype(np.int64)
            d_src = cp.asarray(src)
            d_dst = cp.empty_like(d_src)
            launch.table_launch(name, d_src, d_dst, table, sizes.copy())
            want = np.concatenate([ref(b, ts) for b in blocks])
            res[f"{name}_{ts}"] = bool((cp.asnumpy(d_dst) == want).all())
        x = rng.integers(0, 256, 4096, dtype=np.uint8)
        res[f"byteswap_{ts}"] = bool(
            (cp.asnumpy(launch.byteswap(cp.asarray(x), ts)) == plan.byteswap(x, ts)).all()
        )
    return res


if __name__ == "__main__":
    RESULTS["all_ok"] = all(v.get("ok") for v in RESULTS.values() if isinstance(v, dict))
    with open(sys.argv[1] if len(sys.argv) > 1 else "api_probe.json", "w") as fh:
        json.dump(RESULTS, fh, indent=2, default=str)
