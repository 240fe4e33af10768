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


@probe("size-sync")
def _sync() -> Any:
    """Does decode block the host (a size query) or return before the stream finishes?"""
    encs = [numcodecs.Zstd(level=3).encode(PAYLOAD) for _ in range(64)]
    ins = [nvcomp.as_array(dev(e)) for e in encs]
    codec = raw_codec("Zstd")
    codec.decode(ins)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    outs = codec.decode(ins)
    t_call = time.perf_counter() - t0
    cp.cuda.Device().synchronize()
    t_sync = time.perf_counter() - t0
    return {
        "call_s": round(t_call, 5),
        "call_plus_sync_s": round(t_sync, 5),
        "returns_before_done": t_call < 0.5 * t_sync,
        "n": len(outs),
    }


@probe("kvikio")
def _kvikio() -> Any:
    import kvikio
    import kvikio.defaults

    from cuzarr.gpu.device import gdsinfo

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
    from cuzarr.gpu import backend, plan

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
            backend._table_launch(name, d_src, d_dst, table, sizes.copy())
            want = np.concatenate([ref(b, ts) for b in blocks])
            res[f"{name}_{ts}"] = bool((cp.asnumpy(d_dst) == want).all())
        x = rng.integers(0, 256, 4096, dtype=np.uint8)
        res[f"byteswap_{ts}"] = bool(
            (cp.asnumpy(backend.byteswap(cp.asarray(x), ts)) == plan.byteswap(x, ts)).all()
        )
    return res


if __name__ == "__main__":
    RESULTS["all_ok"] = all(v.get("ok") for v in RESULTS.values() if isinstance(v, dict))
    with open(sys.argv[1] if len(sys.argv) > 1 else "api_probe.json", "w") as fh:
        json.dump(RESULTS, fh, indent=2, default=str)
