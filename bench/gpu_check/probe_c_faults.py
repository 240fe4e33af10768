"""Which bad streams make nvCOMP's batched C decode fault, and under which call variants.

The third GPU run (2026-12-04) hit ``cudaErrorIllegalAddress`` at the first synchronize after
cuzarr's C-API decode of a zlib chunk whose second half is zeroed (tests/gpu/test_gpu_corrupt),
and every later test failed on the dead context. Each (stream, variant) pair runs here in its
own process (a fault is sticky): ``python`` is nvCOMP's Python API as cuzarr called it before;
``c`` is cuzarr.gpu.nvcomp_batched.decompress; ``c-cuda`` forces the CUDA backend;
``c-padded`` gives the input and output 1 MiB of slack each. Usage: ``probe_c_faults.py OUT``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

CASES = (
    "valid-zlib",
    "zlib-zero-tail",
    "zlib-short",
    "zstd-zero-tail",
    "zstd-truncated",
    "lz4-truncated",
    "valid-zstd",
)
VARIANTS = ("python", "c", "c-cuda", "c-padded")
N = 4096


def stream(case: str) -> tuple[str, bytes, int]:
    import numcodecs
    import numpy as np

    rng = np.random.default_rng(7)
    data = (np.arange(3 * N, dtype="<i4") % 1000) * 3 + rng.integers(0, 4, 3 * N, dtype="<i4")
    chunk = data[N : 2 * N].tobytes()
    kind, _, how = case.partition("-")
    codec = {
        "zlib": numcodecs.Zlib(level=1),
        "zstd": numcodecs.Zstd(level=1),
        "valid": None,
        "lz4": numcodecs.LZ4(),
    }[kind]
    if kind == "valid":
        kind, how = how, ""
        codec = numcodecs.Zlib(level=1) if kind == "zlib" else numcodecs.Zstd(level=1)
    blob = bytes(codec.encode(chunk))
    if how == "zero-tail":
        blob = blob[: len(blob) // 2] + b"\x00" * (len(blob) - len(blob) // 2)
    elif how == "truncated":
        blob = blob[: len(blob) * 2 // 3]
    elif how == "short":
        blob = zlib.compress(b"\x01" * 12)
    if kind == "zlib":
        return "Deflate", blob[2:-4], len(chunk)
    if kind == "lz4":
        return "LZ4", blob[4:], len(chunk)
    return "Zstd", blob, len(chunk)


def one(case: str, variant: str) -> dict[str, object]:
    import ctypes
    import struct

    import cupy as cp
    import numpy as np

    algorithm, raw, want = stream(case)
    pad = (1 << 20) if variant == "c-padded" else 0
    src = cp.zeros(len(raw) + pad, cp.uint8)
    src[: len(raw)] = cp.asarray(np.frombuffer(raw, np.uint8))
    out = cp.full(want + pad, 0xAB, cp.uint8)
    if variant == "python":
        from nvidia import nvcomp

        codec = nvcomp.Codec(
            algorithm=algorithm,
            bitstream_kind=nvcomp.BitstreamKind.RAW,
            cuda_stream=cp.cuda.get_current_stream().ptr,
        )
        cfg = codec.decompression_config(codec.compression_config([want]))
        got = codec.decode(
            nvcomp.as_arrays(src, [0], [len(raw)]),
            out=nvcomp.as_arrays(out, [0], [want]),
            decompression_config=cfg,
        )
        cp.cuda.Device().synchronize()
        return {"sizes": [int(x) for x in got.buffer_sizes]}
    from cuzarr.gpu import nvcomp_batched as nb

    if variant == "c-cuda":
        real = nb.DecompressOpts

        class Cuda(real):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                ctypes.memmove(ctypes.addressof(self), struct.pack("<i", 2), 4)

        nb.DecompressOpts = Cuda  # type: ignore[misc]
    statuses, sizes = nb.decompress(
        algorithm, [int(src.data.ptr)], [len(raw)], [int(out.data.ptr)], [want]
    )
    cp.cuda.Device().synchronize()
    return {
        "status": int(statuses[0]),
        "size": int(sizes[0]),
        "equal_prefix16": bool((out[:16].get() != 0xAB).any()),
    }


def main() -> None:
    if sys.argv[1] == "--one":
        try:
            res = one(sys.argv[2], sys.argv[3])
        except Exception as exc:
            res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print("RESULT " + json.dumps(res))
        return
    results: dict[str, object] = {}
    for case in CASES:
        for variant in VARIANTS:
            try:
                p = subprocess.run(
                    [sys.executable, __file__, "--one", case, variant],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                res = (
                    json.loads(lines[-1][7:])
                    if lines
                    else {"rc": p.returncode, "stderr": p.stderr[-300:]}
                )
            except subprocess.TimeoutExpired:
                res = {"timeout": 30}
            results[f"{case}/{variant}"] = res
            print(case, variant, json.dumps(res)[:200], flush=True)
    with open(sys.argv[1], "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
