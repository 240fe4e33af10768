"""nvCOMP's batched C API for RAW decodes: every stream's status and decoded size, checked.

nvCOMP's Python API (``nvidia.nvcomp.Codec.decode``) reports neither: on the first real GPU run
(H200, nvCOMP 6.0.0, ``bench/results/gpu-check-2026-12-04``) a zstd frame with a zeroed or
truncated body, a flipped byte, a raw deflate or LZ4 stream that decodes short, and deflate
garbage all "decoded" without an exception, ``buffer_sizes`` reporting the output capacities
given. Wrong bytes would have reached the caller. The C functions
``nvcompBatched<Algorithm>DecompressAsync`` write a status and the decoded size of each stream
to device memory; :func:`decompress` calls them through :mod:`ctypes` on the library the
``nvidia-libnvcomp`` wheel ships (``nvidia.libnvcomp.load_library()``, the library
``nvidia.nvcomp`` itself runs on), downloads both in one copy and returns them.

Signatures are those of nvCOMP 6.0's headers (``nvcomp/zstd.h``, ``lz4.h``, ``deflate.h``,
``snappy.h``): the four algorithms' decompress functions and temp-size queries take the same
arguments, and each options struct is 64 bytes whose all-zero value is the default
(``NVCOMP_DECOMPRESS_BACKEND_DEFAULT``, no sorting, LZ4's ``NVCOMP_TYPE_CHAR`` and no
bitshuffle).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np
import numpy.typing as npt

from cuzarr.errors import CuzarrError, UnsupportedError

__all__ = ["ALGORITHMS", "STATUS_NAMES", "NvcompCallError", "decompress"]

#: The RAW algorithms decoded here (the C API's spelling).
ALGORITHMS = ("Zstd", "LZ4", "Deflate", "Snappy")

#: ``nvcompStatus_t`` (nvcomp/shared_types.h).
STATUS_NAMES = {
    0: "nvcompSuccess",
    10: "nvcompErrorInvalidValue",
    11: "nvcompErrorNotSupported",
    12: "nvcompErrorCannotDecompress",
    13: "nvcompErrorBadChecksum",
    14: "nvcompErrorCannotVerifyChecksums",
    15: "nvcompErrorOutputBufferTooSmall",
    16: "nvcompErrorWrongHeaderLength",
    17: "nvcompErrorAlignment",
    18: "nvcompErrorChunkSizeTooLarge",
    19: "nvcompErrorCannotCompress",
    20: "nvcompErrorWrongInputLength",
    21: "nvcompErrorBatchSizeTooLarge",
    22: "nvcompErrorSubChunkCountTooLarge",
    23: "nvcompErrorSubChunkCountTooSmall",
    24: "nvcompErrorOutputBufferAlignmentTooSmall",
    1000: "nvcompErrorCudaError",
    10000: "nvcompErrorInternal",
}


#: ``nvcomp<Algorithm>DecompressionMaxAllowedChunkSize`` (larger chunks decode on the CPU).
MAX_CHUNK = {
    "Zstd": (1 << 31) - 1,
    "LZ4": (1 << 32) - 1,
    "Deflate": (1 << 32) - 1,
    "Snappy": (1 << 31) - 1,
}
#: Statuses that mean "nvCOMP does not do this" (the CPU decodes instead), not a fault.
_UNSUPPORTED = {11, 18}


class NvcompCallError(CuzarrError):
    """nvCOMP refused a call as a whole (a launch or device error, not one bad stream)."""


class DecompressOpts(ctypes.Structure):
    """``nvcompBatched<Algorithm>DecompressOpts_t``: 64 bytes, all zero is the default."""

    _fields_ = [("raw", ctypes.c_char * 64)]


_P = ctypes.c_void_p
_N = ctypes.c_size_t
#: nvcompBatched<Algorithm>DecompressGetTempSize(num_chunks, max_uncompressed_chunk_bytes,
#: decompress_opts, *temp_bytes, max_total_uncompressed_bytes, stream)
TEMP_SIZE_ARGTYPES = (_N, _N, DecompressOpts, ctypes.POINTER(_N), _N, _P)
#: nvcompBatched<Algorithm>DecompressAsync(compressed_ptrs, compressed_bytes,
#: uncompressed_buffer_bytes, *uncompressed_bytes, num_chunks, temp_ptr, temp_bytes,
#: uncompressed_ptrs, decompress_opts, *statuses, stream); every pointer is device memory.
DECOMPRESS_ARGTYPES = (_P, _P, _P, _P, _N, _P, _N, _P, DecompressOpts, _P, _P)


@dataclass(frozen=True)
class _Functions:
    temp_size: Any
    decompress: Any


_lock = threading.Lock()
_bound: dict[str, _Functions] = {}


def _library() -> Any:
    try:
        from nvidia import libnvcomp
    except ImportError as exc:  # pragma: no cover - nvidia-nvcomp requires it
        raise UnsupportedError(f"nvCOMP's C library is not installed: {exc}") from exc
    lib = libnvcomp.load_library()
    if lib is None:  # pragma: no cover - a broken installation
        raise UnsupportedError("nvidia.libnvcomp.load_library() found no libnvcomp")
    return lib


def _functions(algorithm: str) -> _Functions:
    """The two C functions of ``algorithm``, their argument and result types declared."""
    with _lock:
        bound = _bound.get(algorithm)
        if bound is None:
            if algorithm not in ALGORITHMS:
                raise UnsupportedError(f"no batched C decoder for nvCOMP algorithm {algorithm!r}")
            lib = _library()
            temp = getattr(lib, f"nvcompBatched{algorithm}DecompressGetTempSize")
            temp.argtypes = TEMP_SIZE_ARGTYPES
            temp.restype = ctypes.c_int
            run = getattr(lib, f"nvcompBatched{algorithm}DecompressAsync")
            run.argtypes = DECOMPRESS_ARGTYPES
            run.restype = ctypes.c_int
            bound = _bound[algorithm] = _Functions(temp, run)
        return bound


def _check(status: int, what: str) -> None:
    if status != 0:
        message = f"nvCOMP {what} returned {STATUS_NAMES.get(status, status)}"
        raise (UnsupportedError if status in _UNSUPPORTED else NvcompCallError)(message)


def decompress(
    algorithm: str,
    src_ptrs: Sequence[int],
    src_sizes: Sequence[int],
    out_ptrs: Sequence[int],
    out_sizes: Sequence[int],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint64]]:
    """Decode RAW streams at device addresses into device buffers, on the current stream.

    Parameters
    ----------
    algorithm : str
        ``"Zstd"``, ``"LZ4"``, ``"Deflate"`` or ``"Snappy"``.
    src_ptrs, src_sizes : sequence of int
        Each stream's device address and length.
    out_ptrs, out_sizes : sequence of int
        Each output's device address and capacity.

    Returns
    -------
    (numpy.ndarray of int32, numpy.ndarray of uint64)
        Each stream's ``nvcompStatus_t`` and decoded size, on the host (the stream has been
        synchronized to read them).

    Raises
    ------
    NvcompCallError
        When nvCOMP refuses the call itself (a launch error, not a bad stream).
    UnsupportedError
        When nvCOMP's C library cannot be loaded, has no decoder for ``algorithm``, or does
        not take chunks this large (the caller decodes on the CPU).
    """
    n = len(src_ptrs)
    fns = _functions(algorithm)
    stream = int(cupy.cuda.get_current_stream().ptr)
    opts = DecompressOpts()
    temp_bytes = ctypes.c_size_t(0)
    widest = max(out_sizes, default=0)
    if widest > MAX_CHUNK[algorithm]:
        raise UnsupportedError(
            f"nvCOMP decodes {algorithm} chunks of at most {MAX_CHUNK[algorithm]} bytes,"
            f" not {widest}"
        )
    _check(
        fns.temp_size(n, widest, opts, ctypes.byref(temp_bytes), int(sum(out_sizes)), stream),
        f"{algorithm} temp-size query",
    )
    temp = cupy.empty(max(1, temp_bytes.value), cupy.uint8)
    # One upload: compressed pointers, their sizes, output capacities, output pointers.
    table = cupy.asarray(np.array([*src_ptrs, *src_sizes, *out_sizes, *out_ptrs], dtype=np.uint64))
    # One download: decoded sizes (n uint64), then statuses (n int32 in the next n words).
    results = cupy.zeros(2 * max(1, n), cupy.uint64)
    base, res = int(table.data.ptr), int(results.data.ptr)
    word = 8
    _check(
        fns.decompress(
            base,
            base + word * n,
            base + 2 * word * n,
            res,
            n,
            int(temp.data.ptr),
            temp_bytes.value,
            base + 3 * word * n,
            opts,
            res + word * n,
            stream,
        ),
        f"{algorithm} batched decompress",
    )
    host = results.get()
    return host[n : 2 * n].view(np.int32)[:n].copy(), host[:n].copy()
