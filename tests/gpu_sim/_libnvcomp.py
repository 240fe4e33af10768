"""A stand-in for ``nvidia.libnvcomp``: nvCOMP 6.0's batched C decode functions.

``load_library()`` returns an object whose ``nvcompBatched<Algorithm>DecompressGetTempSize`` and
``nvcompBatched<Algorithm>DecompressAsync`` (Zstd, LZ4, Deflate, Snappy) behave as the C
functions of ``nvcomp/<algorithm>.h`` do, strictly:

- a function refuses to run until its ``argtypes`` and ``restype`` are declared as the header
  declares them (``size_t``, ``void*``, a 64-byte options struct, ``size_t*``, ``int``
  status), and checks the count and kind of every argument;
- the options must be all zero (the defaults); the temp buffer must be at least the size the
  query gave; every address (pointer tables, streams, outputs, sizes, statuses, temp) must lie
  inside one live device allocation (``_cupy.DeviceMemory``), as a GPU would fault otherwise,
  and streams and outputs must have the algorithm's alignment;
- each stream gets a status (``nvcompSuccess``; ``nvcompErrorCannotDecompress`` for a stream
  the CPU library rejects, with the output capacity as its size so that only the status
  tells; ``nvcompErrorOutputBufferTooSmall`` when the output capacity is short) and its
  decoded size, written to device memory; nothing raises for a bad stream, as on the GPU
  (bench/gpu_check/probe_errors.py); a chunk over the header's largest makes the temp-size
  query return ``nvcompErrorChunkSizeTooLarge``;
- ``_nvcomp.FAULTS["decode"]`` makes the next calls return ``nvcompErrorCudaError``.

Calls are recorded as ``decode`` events (``n``, ``nbytes``, ``configured``/``out`` true: the C
API always gets the output capacities and buffers).
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from typing import Any

import numpy as np

from . import _cupy, _nvcomp
from ._events import record

ALGORITHMS = ("Zstd", "LZ4", "Deflate", "Snappy")
SUCCESS, CANNOT_DECOMPRESS, OUTPUT_TOO_SMALL, ALIGNMENT, CUDA_ERROR = 0, 12, 15, 17, 1000
_SIZE_T, _VOID_P = ctypes.c_size_t, ctypes.c_void_p
_OPTS = "opts"  # a 64-byte struct passed by value
_SIZE_T_P = "size_t*"
#: The headers' parameter lists (nvcomp/zstd.h, lz4.h, deflate.h, snappy.h of nvCOMP 6.0).
TEMP_SIZE = (_SIZE_T, _SIZE_T, _OPTS, _SIZE_T_P, _SIZE_T, _VOID_P)
DECOMPRESS = (
    _VOID_P,
    _VOID_P,
    _VOID_P,
    _VOID_P,
    _SIZE_T,
    _VOID_P,
    _SIZE_T,
    _VOID_P,
    _OPTS,
    _VOID_P,
    _VOID_P,
)
#: Temp bytes the simulated decoders ask for (nonzero, so that a missing temp buffer fails).
_TEMP_PER_CHUNK = 64


def _matches(declared: Any, want: Any) -> bool:
    if want is _OPTS:
        return (
            isinstance(declared, type)
            and issubclass(declared, ctypes.Structure)
            and ctypes.sizeof(declared) == 64
        )
    if want is _SIZE_T_P:
        return declared is ctypes.POINTER(ctypes.c_size_t)
    return bool(declared is want)


def _check_arg(name: str, i: int, want: Any, value: Any) -> None:
    where = f"{name} argument {i}"
    if want is _OPTS:
        if not isinstance(value, ctypes.Structure) or ctypes.sizeof(value) != 64:
            raise TypeError(f"{where}: expected the 64-byte options struct by value")
        if any(bytes(value)):
            raise ValueError(f"{where}: options other than the defaults (all zero)")
    elif want is _SIZE_T_P:
        target = getattr(value, "_obj", None)
        if not isinstance(target, ctypes.c_size_t):
            raise TypeError(f"{where}: expected ctypes.byref(c_size_t)")
    elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{where}: expected a non-negative int, got {value!r}")


class CFunction:
    """One C function: unusable until declared as its header declares it."""

    def __init__(self, name: str, params: tuple[Any, ...], impl: Callable[..., int]) -> None:
        self.__name__ = name
        self._params = params
        self._impl = impl
        self.argtypes: Any = None
        self.restype: Any = ctypes.c_int  # ctypes' default, as the real CDLL has it

    def __call__(self, *args: Any) -> int:
        name = self.__name__
        if self.argtypes is None or len(self.argtypes) != len(self._params):
            raise TypeError(f"{name}: argtypes not declared as the header declares them")
        for i, (declared, want) in enumerate(zip(self.argtypes, self._params, strict=True)):
            if not _matches(declared, want):
                raise TypeError(f"{name}: argtypes[{i}] is {declared!r}, the header says {want}")
        if self.restype is not ctypes.c_int:
            raise TypeError(f"{name}: restype must be c_int (nvcompStatus_t)")
        if len(args) != len(self._params):
            raise TypeError(f"{name} takes {len(self._params)} arguments, got {len(args)}")
        for i, (want, value) in enumerate(zip(self._params, args, strict=True)):
            _check_arg(name, i, want, value)
        return int(self._impl(*args))


#: nvcomp<Algorithm>DecompressionMaxAllowedChunkSize of the headers.
MAX_CHUNK = {
    "Zstd": (1 << 31) - 1,
    "LZ4": (1 << 32) - 1,
    "Deflate": (1 << 32) - 1,
    "Snappy": (1 << 31) - 1,
}
CHUNK_TOO_LARGE = 18


def _temp_sizer(algorithm: str) -> Callable[..., int]:
    def temp_size(
        num_chunks: int, max_chunk: int, opts: Any, temp: Any, max_total: int, stream: int
    ) -> int:
        if max_chunk > MAX_CHUNK[algorithm]:
            return CHUNK_TOO_LARGE
        temp._obj.value = _TEMP_PER_CHUNK * max(1, num_chunks)
        return SUCCESS

    return temp_size


def _decompressor(algorithm: str) -> Callable[..., int]:
    align = _nvcomp._ALIGNMENT[algorithm]

    def run(
        src_ptrs: int,
        src_sizes: int,
        caps: int,
        actual: int,
        n: int,
        temp: int,
        temp_bytes: int,
        out_ptrs: int,
        opts: Any,
        statuses: int,
        stream: int,
    ) -> int:
        if _nvcomp.FAULTS["decode"] > 0:
            _nvcomp.FAULTS["decode"] -= 1
            return CUDA_ERROR
        mem = _cupy.DeviceMemory()
        table = 8 * n
        srcs = mem.bytes_at(src_ptrs, table, "compressed pointers").view(np.uint64)
        lens = mem.bytes_at(src_sizes, table, "compressed sizes").view(np.uint64)
        limits = mem.bytes_at(caps, table, "output capacities").view(np.uint64)
        outs = mem.bytes_at(out_ptrs, table, "output pointers").view(np.uint64)
        sizes = mem.bytes_at(actual, table, "decoded sizes").view(np.uint64)
        status = mem.bytes_at(statuses, 4 * n, "statuses").view(np.int32)
        if temp_bytes < _TEMP_PER_CHUNK * max(1, n):
            return 10  # nvcompErrorInvalidValue: less temp than the query asked for
        mem.bytes_at(temp, temp_bytes, "temp buffer")
        for p in (*srcs.tolist(), *outs.tolist()):
            if p % align:
                return ALIGNMENT
        record("decode", algorithm, n=n, configured=True, out=True, nbytes=int(lens.sum()), api="c")
        for i in range(n):
            src = mem.bytes_at(int(srcs[i]), int(lens[i]), f"stream {i}")
            dest = mem.bytes_at(int(outs[i]), int(limits[i]), f"output {i}")
            try:
                data = _nvcomp._decode_stream(
                    algorithm, _nvcomp.BitstreamKind.RAW, src.tobytes(), int(limits[i])
                )
            except Exception:
                # The size written is the capacity: only the status tells (the harder case;
                # real nvCOMP reports a zstd frame's declared size for a corrupt body).
                status[i], sizes[i] = CANNOT_DECOMPRESS, int(limits[i])
                dest[...] = 0xDB  # whatever the device left there
                continue
            if len(data) > dest.size:
                status[i], sizes[i] = OUTPUT_TOO_SMALL, 0
                continue
            dest[: len(data)] = np.frombuffer(data, np.uint8)
            status[i], sizes[i] = SUCCESS, len(data)
        return SUCCESS

    return run


def _make_library() -> types.SimpleNamespace:
    lib = types.SimpleNamespace()
    for algorithm in ALGORITHMS:
        temp = f"nvcompBatched{algorithm}DecompressGetTempSize"
        run = f"nvcompBatched{algorithm}DecompressAsync"
        setattr(lib, temp, CFunction(temp, TEMP_SIZE, _temp_sizer(algorithm)))
        setattr(lib, run, CFunction(run, DECOMPRESS, _decompressor(algorithm)))
    return lib


_library: types.SimpleNamespace | None = None


def load_library() -> types.SimpleNamespace:
    """The simulated libnvcomp (one per installation, as the process has one library)."""
    global _library
    if _library is None:
        _library = _make_library()
    return _library


def _make_module() -> types.ModuleType:
    mod = types.ModuleType("nvidia.libnvcomp")
    mod.__spec__ = ModuleSpec("nvidia.libnvcomp", None)
    mod.__dict__.update(__version__="6.0.0.12+sim", load_library=load_library)
    return mod


module = _make_module()
