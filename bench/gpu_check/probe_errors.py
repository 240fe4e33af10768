"""How nvCOMP's Python API reports corrupt and short streams; one JSON of findings.

The GPU suite found (first real GPU, 2026-12-04) that ``Codec.decode(..., out=...)`` raised
nothing for a zstd stream whose second half is zeroed nor for a zlib body that decodes to 12
of 40 bytes. This asks, for each bad stream in a batch between two good ones, what each way of
calling ``decode`` shows: an exception (at the call, at synchronize, at ``buffer_sizes``), the
sizes it reports, what lands in the output, and what the config and result objects offer.
Usage: ``python3 probe_errors.py OUT.json``.
"""

from __future__ import annotations

import json
import sys
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import cupy as cp
import numcodecs
import numpy as np
from nvidia import nvcomp

SENTINEL = 0xAB


def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return {"value": fn()}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:400]}


def public(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(obj).__name__}
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            v = getattr(obj, name)
            out[name] = "<callable>" if callable(v) else repr(v)[:200]
        except Exception as exc:
            out[name] = f"<{type(exc).__name__}: {exc}>"[:200]
    return out


def raw_zstd(b: bytes) -> bytes:
    return bytes(numcodecs.Zstd(level=1).encode(b))


def raw_deflate(b: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(b) + c.flush()


def raw_lz4(b: bytes) -> bytes:
    return bytes(numcodecs.LZ4().encode(b))[4:]


def payload(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return ((np.arange(n) % 251).astype(np.uint8) ^ rng.integers(0, 4, n, dtype=np.uint8)).tobytes()


def zero_tail(b: bytes) -> bytes:
    return b[: len(b) // 2] + b"\x00" * (len(b) - len(b) // 2)


CASES: dict[str, tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes], int | None]] = {
    # name: (algorithm, encoder, how the bad stream is made from the good one, declared size)
    "zstd_zero_tail": ("Zstd", raw_zstd, zero_tail, None),
    "zstd_truncated": ("Zstd", raw_zstd, lambda b: b[: len(b) * 2 // 3], None),
    "zstd_flipped": ("Zstd", raw_zstd, lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:], None),
    "deflate_short": ("Deflate", raw_deflate, None, 12),  # type: ignore[dict-item]
    "deflate_zero_tail": ("Deflate", raw_deflate, zero_tail, None),
    "deflate_garbage": ("Deflate", raw_deflate, lambda b: bytes(range(256)) * 4, None),
    "lz4_truncated": ("LZ4", raw_lz4, lambda b: b[: len(b) // 2], None),
    "lz4_short": ("LZ4", raw_lz4, None, 12),  # type: ignore[dict-item]
}


def one_case(name: str) -> dict[str, Any]:
    algorithm, enc, spoil, short = CASES[name]
    n = 1 << 16
    goods = [payload(n, s) for s in range(3)]
    streams = [enc(g) for g in goods]
    if spoil is None:  # a valid stream of ``short`` bytes where n are expected
        streams[1] = enc(goods[1][:short])
    else:
        streams[1] = spoil(streams[1])
    res: dict[str, Any] = {"stream_sizes": [len(s) for s in streams]}
    codec = nvcomp.Codec(
        algorithm=algorithm,
        bitstream_kind=nvcomp.BitstreamKind.RAW,
        cuda_stream=cp.cuda.get_current_stream().ptr,
    )
    dsrc = [cp.asarray(np.frombuffer(s, np.uint8)) for s in streams]

    def check_out(outs_dev: list[Any]) -> dict[str, Any]:
        got = [o.get().tobytes() for o in outs_dev]
        return {
            "good_equal": [got[0] == goods[0], got[2] == goods[2]],
            "bad_untouched": all(x == SENTINEL for x in got[1]),
            "bad_prefix_equal": got[1][:12] == goods[1][:12],
            "bad_equal_full": got[1] == goods[1],
        }

    # A: as cuzarr calls it: out= sized from the specs, config from those sizes.
    def mode_a() -> dict[str, Any]:
        r: dict[str, Any] = {}
        outs_dev = [cp.full(n, SENTINEL, cp.uint8) for _ in streams]
        outs = nvcomp.as_arrays(outs_dev)
        cfg = codec.decompression_config(codec.compression_config([n] * 3))
        r["config"] = public(cfg)
        call = attempt(
            lambda: codec.decode(nvcomp.as_arrays(dsrc), out=outs, decompression_config=cfg)
        )
        r["call"] = {k: (v if k == "error" else type(v).__name__) for k, v in call.items()}
        r["sync"] = attempt(lambda: cp.cuda.Device().synchronize())
        if "value" in call:
            result = call["value"]
            r["result"] = public(result)
            r["result_sizes"] = attempt(lambda: [int(x) for x in result.buffer_sizes])
            r["elements"] = attempt(lambda: [public(result[i]) for i in range(3)])
        r["out_sizes_after"] = attempt(lambda: [int(x) for x in outs.buffer_sizes])
        r["config_after"] = public(cfg)
        r["output"] = attempt(lambda: check_out(outs_dev))
        return r

    # B: no out, no config: nvCOMP sizes and allocates.
    def mode_b() -> dict[str, Any]:
        r: dict[str, Any] = {}
        call = attempt(lambda: codec.decode(nvcomp.as_arrays(dsrc)))
        r["call"] = {k: (v if k == "error" else type(v).__name__) for k, v in call.items()}
        r["sync"] = attempt(lambda: cp.cuda.Device().synchronize())
        if "value" in call:
            result = call["value"]
            r["result"] = public(result)
            r["result_sizes"] = attempt(lambda: [int(x) for x in result.buffer_sizes])
            r["elements"] = attempt(
                lambda: [
                    {"size": int(result[i].buffer_size), "capacity": repr(result[i].capacity)}
                    for i in range(3)
                ]
            )
        return r

    # C: config from the streams (nvCOMP's own size query), out= given.
    def mode_c() -> dict[str, Any]:
        r: dict[str, Any] = {}
        srcs = nvcomp.as_arrays(dsrc)
        cfg_call = attempt(lambda: codec.decompression_config(srcs))
        r["config_call"] = {k: (v if k == "error" else public(v)) for k, v in cfg_call.items()}
        if "value" in cfg_call:
            outs_dev = [cp.full(n, SENTINEL, cp.uint8) for _ in streams]
            outs = nvcomp.as_arrays(outs_dev)
            call = attempt(
                lambda: codec.decode(srcs, out=outs, decompression_config=cfg_call["value"])
            )
            r["call"] = {k: (v if k == "error" else type(v).__name__) for k, v in call.items()}
            r["sync"] = attempt(lambda: cp.cuda.Device().synchronize())
            if "value" in call:
                r["result_sizes"] = attempt(lambda: [int(x) for x in call["value"].buffer_sizes])
            r["output"] = attempt(lambda: check_out(outs_dev))
        return r

    # D: the bad stream alone, single-array decode.
    def mode_d() -> dict[str, Any]:
        r: dict[str, Any] = {}
        call = attempt(lambda: codec.decode(nvcomp.as_array(dsrc[1])))
        r["call"] = {k: (v if k == "error" else type(v).__name__) for k, v in call.items()}
        r["sync"] = attempt(lambda: cp.cuda.Device().synchronize())
        if "value" in call:
            r["size"] = attempt(lambda: int(call["value"].buffer_size))
        return r

    for key, fn in (
        ("A_out_and_config", mode_a),
        ("B_plain", mode_b),
        ("C_config_from_streams", mode_c),
        ("D_single", mode_d),
    ):
        try:
            res[key] = fn()
        except Exception:
            res[key] = {"crashed": traceback.format_exc(limit=3)}
    # Is the device still healthy after this case?
    res["healthy_after"] = attempt(lambda: int(cp.arange(10).sum().get()))
    return res


def main() -> None:
    out: dict[str, Any] = {"nvcomp": nvcomp.__version__}
    for name in CASES:
        out[name] = one_case(name)
        print(name, json.dumps(out[name], default=str)[:600], flush=True)
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
