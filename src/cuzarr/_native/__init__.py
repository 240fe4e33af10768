"""cuzarr's batch helper: small C loops over many chunks, loaded with ctypes.

``czbatch.c`` is compiled into ``libczbatch.so`` by the build hook (``hatch_build.py``) when
cuzarr is installed. It holds no codec: it calls codec functions it is handed (c-blosc's and
libzstd's, from numcodecs) once per chunk, so Python crosses into C, and ctypes releases the
GIL, once per batch. Without it (no C compiler at install, or ``CUZARR_NATIVE=0``) cuzarr
takes its pure-Python paths, which give the same results.
"""

from __future__ import annotations

import array as array_module
import contextlib
import ctypes
import functools
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "ABI_VERSION",
    "BLOSC",
    "LIBRARY",
    "MAX_HELPERS",
    "NOT_ENCODED",
    "ZSTD",
    "Compressor",
    "address",
    "as_offsets",
    "check_buffers",
    "check_runs",
    "copy_array",
    "gather",
    "helper",
    "lending",
    "put_boxes",
    "put_files",
    "running_threads",
    "set_lending",
    "symbols",
    "unavailable_reason",
]

LIBRARY = Path(__file__).with_name("libczbatch.so")
#: The helper's ``cz_abi_version()``: a library built from another source is not used.
ABI_VERSION = 22

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I32 = ctypes.c_int


def _bind(lib: ctypes.CDLL) -> None:
    lib.cz_abi_version.argtypes = []
    lib.cz_abi_version.restype = _I32
    lib.cz_leave_cpu_probe.argtypes = []
    lib.cz_leave_cpu_probe.restype = _I32
    lib.cz_decompress_many.argtypes = [_P, _I64, _P, _P, _P, _P, _I64, _P]
    lib.cz_decompress_many.restype = _I64
    lib.cz_compress_many.argtypes = [
        _P, _I64, _I32, _I32, _I64, _I64, _P, _P, _P, _P, _I64, ctypes.c_char_p, _I64, _P,
    ]
    lib.cz_compress_many.restype = _I64
    lib.cz_zstd_decompress_many.argtypes = [_P, _P, _P, _P, _I64, _P, _P, _P, _P, _P, _I64, _P]
    lib.cz_zstd_decompress_many.restype = _I64
    lib.cz_gather.argtypes = [_I64, _P, _P, _P, _P, _P]
    lib.cz_gather.restype = None
    lib.cz_copy_array.argtypes = [_P, _P, ctypes.c_int32, _I64, _P, ctypes.c_int32]
    lib.cz_copy_array.restype = None
    lib.cz_read_zstd_boxes.argtypes = [
        _P, _P, _P, _I64, ctypes.c_char_p, _I64, _I64, ctypes.c_int32, _I64, _P, _P, _P, _P,
        ctypes.c_int32, _P,
    ]
    lib.cz_read_zstd_boxes.restype = _I64
    lib.cz_put_files.argtypes = [
        _I64, ctypes.c_char_p, ctypes.c_char_p, _I64, ctypes.c_char_p, _P, ctypes.c_int32, _I64,
        _P,
    ]
    lib.cz_put_files.restype = _I64
    lib.cz_put_boxes.argtypes = [_P, ctypes.c_char_p]
    lib.cz_put_boxes.restype = _I64
    lib.cz_read_blosc_split.argtypes = [_P, ctypes.c_char_p]
    lib.cz_read_blosc_split.restype = _I64
    lib.cz_split_reads.argtypes = []
    lib.cz_split_reads.restype = _I64
    lib.cz_set_lending.argtypes = [ctypes.c_int32]
    lib.cz_set_lending.restype = ctypes.c_int32
    lib.cz_running_threads.argtypes = []
    lib.cz_running_threads.restype = ctypes.c_int32


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    if os.environ.get("CUZARR_NATIVE", "1") == "0":
        return None, "disabled by CUZARR_NATIVE=0"
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        return None, f"{LIBRARY} could not be loaded ({exc}); reinstall cuzarr with a C compiler"
    try:
        _bind(lib)
        version = lib.cz_abi_version()
    except AttributeError as exc:
        return None, f"{LIBRARY} is not cuzarr's batch helper ({exc})"
    if version != ABI_VERSION:
        return None, (
            f"{LIBRARY} has ABI version {version}, expected {ABI_VERSION} (built from another "
            "source: reinstall cuzarr)"
        )
    return lib, None


def helper() -> ctypes.CDLL | None:
    """The loaded helper, or ``None`` (see :func:`unavailable_reason`)."""
    return _load()[0]


def unavailable_reason() -> str | None:
    """Why the helper is not used, or ``None`` when it is."""
    return _load()[1]


#: When the helper's calls take the helper threads their callers offer (``cz_set_lending``):
#: ``"idle"`` (the default): a read of one Blosc chunk in parts takes no more than the CPUs the
#: calling thread may use less the threads running on the system at that moment (the caller
#: included), so that such reads made from several threads at once (Dask's tasks) do not put
#: more threads on the CPUs than there are, and a ``put_boxes`` write takes what it is offered
#: (measured: no better for writes, ``czbatch.c``); ``"always"``: every call as offered;
#: ``"never"``: none.
LENDING_MODES = ("idle", "always", "never")


def set_lending(mode: str) -> str:
    """Set when the helper's calls take helper threads (:data:`LENDING_MODES`); return the old mode.

    Raises
    ------
    ValueError
        For a mode not in :data:`LENDING_MODES`.
    RuntimeError
        Without the helper (:func:`unavailable_reason` says why).
    """
    if mode not in LENDING_MODES:
        raise ValueError(f"lending mode: expected one of {LENDING_MODES}, got {mode!r}")
    lib = helper()
    if lib is None:
        raise RuntimeError(f"no batch helper: {unavailable_reason()}")
    return LENDING_MODES[lib.cz_set_lending(LENDING_MODES.index(mode))]


@contextlib.contextmanager
def lending(mode: str) -> Iterator[None]:
    """:func:`set_lending` for the block; the previous mode is restored on exit."""
    previous = set_lending(mode)
    try:
        yield
    finally:
        set_lending(previous)


def running_threads() -> int | None:
    """The threads running on the system now, as the ``"idle"`` lending mode counts them.

    ``None`` where the count cannot be read (no helper, not Linux).
    """
    lib = helper()
    got = None if lib is None else int(lib.cz_running_threads())
    return None if got is None or got < 0 else got


def symbols(path: str, names: Sequence[str]) -> tuple[int, ...] | None:
    """Addresses of the functions ``names`` exported by the shared object ``path``.

    ``None`` when the helper is not loaded or any of them is missing (the codec functions the
    helper is handed come from numcodecs' extension modules this way).
    """
    if helper() is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        found = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in names]
    except (OSError, AttributeError):
        return None
    pointers = tuple(int(p) for p in found if p)
    return pointers if len(pointers) == len(names) else None


def check_buffers(what: str, src: npt.NDArray[Any], dest: npt.NDArray[Any]) -> None:
    """Raise ``ValueError`` unless ``src`` is contiguous and ``dest`` contiguous and writable."""
    if not (src.flags.c_contiguous and dest.flags.c_contiguous and dest.flags.writeable):
        raise ValueError(f"{what} needs a contiguous source and a writable contiguous dest")


def as_offsets(*arrays: npt.NDArray[Any]) -> list[npt.NDArray[np.int64]]:
    """Each array as a contiguous ``int64`` array (what the helper's offset arguments point to)."""
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def address(a: npt.NDArray[Any]) -> int:
    """The address of an array's first byte (for the helper's pointer arguments)."""
    return int(a.__array_interface__["data"][0])


def check_runs(
    what: str, offsets: npt.NDArray[np.int64], size: int | npt.NDArray[np.int64], total: int
) -> None:
    """Raise ``ValueError`` unless every run ``[offsets[i], offsets[i] + size)`` fits.

    ``total`` is the buffer's size. The C loops read and write where they are told: this is
    their bounds check (not an ``assert``, which ``python -O`` drops).
    """
    if len(offsets) and (int(offsets.min()) < 0 or int((offsets + size).max()) > total):
        raise ValueError(f"{what}: a byte run lies outside its {total}-byte buffer")


def gather(
    src: npt.NDArray[np.uint8],
    src_offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    dest: npt.NDArray[np.uint8],
    dest_offsets: npt.NDArray[np.int64],
) -> None:
    """``dest[dest_offsets[i]:][:lengths[i]] = src[src_offsets[i]:][:lengths[i]]`` for every i.

    One call into C for all runs (the helper must be loaded: :func:`helper`).
    """
    lib = helper()
    assert lib is not None, "gather needs the batch helper"
    check_buffers("gather", src, dest)
    n = len(lengths)
    if not n:
        return
    if len(src_offsets) != n or len(dest_offsets) != n or int(lengths.min()) < 0:
        raise ValueError("gather: offsets and lengths must pair up, lengths >= 0")
    check_runs("gather src_offsets", src_offsets, lengths, src.nbytes)
    check_runs("gather dest_offsets", dest_offsets, lengths, dest.nbytes)
    so, ln, do = as_offsets(src_offsets, lengths, dest_offsets)
    lib.cz_gather(n, address(src), address(so), address(ln), address(dest), address(do))


#: Most dimensions ``cz_copy_array`` takes (``CZ_MAX_DIMS``; NumPy allows 64).
_COPY_MAX_DIMS = 64

#: Array types whose memory ``copy_array`` writes itself: NumPy's own and its file-backed
#: ``memmap`` (the same memory layout; subclasses that may override assignment are left to
#: NumPy).
_PLAIN_ARRAYS = (np.ndarray, np.memmap)


def copy_array(dest: npt.NDArray[Any], src: npt.NDArray[Any], *, streaming: bool) -> bool:
    """``dest[...] = src`` in C with the GIL released; ``False`` (nothing done) where not taken.

    Taken for two NumPy arrays (``ndarray`` or ``memmap``) of one shape and one data type
    without Python objects, ``dest`` writable and their memory apart; any strides.
    ``streaming`` writes the whole cache lines of rows of 64 bytes or more with non-temporal
    stores (``cz_stream_run`` in ``czbatch.c``; a row's partial first and last lines by
    memcpy): for a destination larger than the cache, whose lines an ordinary copy would read
    in only to overwrite. The bytes written are the same either way.
    """
    lib = helper()
    if (
        lib is None
        or type(dest) not in _PLAIN_ARRAYS
        or type(src) not in _PLAIN_ARRAYS
        or dest.dtype != src.dtype
        or dest.shape != src.shape
        or dest.dtype.hasobject
        or not dest.flags.writeable
        or not 1 <= dest.ndim <= _COPY_MAX_DIMS
        or np.may_share_memory(dest, src)
    ):
        return False
    ndim = dest.ndim
    block = np.empty(3 * ndim, np.int64)
    block[:ndim] = dest.shape
    block[ndim : 2 * ndim] = src.strides
    block[2 * ndim :] = dest.strides
    lib.cz_copy_array(
        address(src), address(dest), ndim, dest.dtype.itemsize, address(block), int(streaming)
    )
    return True


def put_files(
    paths: Sequence[bytes],
    buffers: Sequence[npt.NDArray[np.uint8]],
    *,
    tag: bytes,
    first: int,
    suffix: bytes,
    exchange: bool,
    exchange_min: int,
) -> list[int]:
    """Write ``buffers[i]`` to a temporary file and move it to ``paths[i]``, all in one call.

    File i's temporary name is ``paths[i] + tag + hex(first + i) + suffix``. See
    ``cz_put_files`` in ``czbatch.c``: per file, 0 renamed, 1 swapped with the old file (now
    at the temporary name), 2 renamed because swapping is not supported, a negative errno
    when nothing was written. ``buffers`` are contiguous 1-d ``uint8`` arrays, kept alive by
    the caller (the helper must be loaded: :func:`helper`).
    """
    lib = helper()
    assert lib is not None, "put_files needs the batch helper"
    n = len(paths)
    if len(buffers) != n:
        raise ValueError("put_files: paths and buffers must pair up")
    if not n:
        return []
    blob = b"\0".join(paths) + b"\0"
    if blob.count(0) != n or b"\0" in tag + suffix:
        raise ValueError("put_files: a name holds a NUL byte")
    spans: list[int] = []
    for b in buffers:
        if not (b.dtype == np.uint8 and b.ndim == 1 and b.flags.c_contiguous):
            raise ValueError("put_files needs contiguous 1-d uint8 buffers")
        spans += (address(b), b.nbytes)
    status = (ctypes.c_int32 * n)()
    lib.cz_put_files(
        n, blob, tag, first, suffix, (ctypes.c_int64 * (2 * n))(*spans), int(exchange),
        exchange_min, status,
    )
    return list(status)


#: ``put_boxes`` status of a box the compressor refused (nothing written).
NOT_ENCODED = -(1 << 20)

#: Most helper threads one :func:`put_boxes` call takes (``czbatch.c``'s ``CZ_HELPERS_MAX``).
MAX_HELPERS = 15

#: Scratch buffers up to this size are kept per thread between calls of :func:`put_boxes`.
_KEEP_SCRATCH = 16 << 20


class _ZstdContext:
    """A libzstd compression context (``ZSTD_createCCtx``), freed with its owner."""

    def __init__(self, create: int, free: int) -> None:
        self._free = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)(free)
        made = ctypes.CFUNCTYPE(ctypes.c_void_p)(create)()
        if not made:
            raise MemoryError("ZSTD_createCCtx failed")
        self.pointer: int = made

    def __del__(self) -> None:
        self._free(self.pointer)


class _Buffer(NamedTuple):
    """A scratch buffer, its address and its size (what :func:`put_boxes` hands to C)."""

    array: npt.NDArray[np.uint8]
    address: int
    size: int


class _Scratch(threading.local):
    """Per thread: the scratch buffers of :func:`put_boxes` and a zstd context.

    The buffers of the last call (box, frame) and the thread's zstd compression contexts
    (reused: a new one allocates its workspace again), one per libzstd by the address of its
    ``ZSTD_createCCtx``: a context is only ever handed to the library that made it (numcodecs
    and python-zstandard ship different versions, with different layouts).
    """

    def __init__(self) -> None:
        self.buffers: tuple[_Buffer, _Buffer] | None = None
        self.zstd: dict[int, _ZstdContext] = {}


def _zstd_functions(functions: tuple[int, ...]) -> tuple[int, ...]:
    """``cz_put_boxes``' zstd functions: a context of this thread's, then five of the library.

    ``functions`` are :attr:`Compressor.functions` of a zstd compressor: ``ZSTD_createCCtx``,
    ``ZSTD_freeCCtx``, ``ZSTD_CCtx_setParameter``, ``ZSTD_compress2``, ``ZSTD_isError``. C gets
    the context, set, compress, is-error, then create and free (its helper threads make their
    own contexts of that library).
    """
    create, free, *rest = functions
    context = _scratch.zstd.get(create)
    if context is None:
        context = _scratch.zstd[create] = _ZstdContext(create, free)
    return (context.pointer, *rest, create, free)


_scratch = _Scratch()


@dataclass(frozen=True, slots=True)
class Compressor:
    """A compressor :func:`put_boxes` calls from C, and its arguments.

    Made by :func:`cuzarr.codecs.blosc_batch.compressor` (numcodecs' c-blosc,
    ``blosc_compress_ctx``) and :func:`cuzarr.codecs.zstd_batch.compressor` (``ZSTD_compress2``
    as numcodecs calls it, of numcodecs' or python-zstandard's libzstd).

    Attributes
    ----------
    kind : int
        :data:`BLOSC` or :data:`ZSTD` (``cz_put_boxes``' ``CZ_BLOSC``, ``CZ_ZSTD``).
    functions : tuple of int
        The addresses of the library functions ``cz_put_boxes`` calls for ``kind``.
    args : tuple of int
        Its integer arguments (blosc: level, shuffle, typesize, block size; zstd: level,
        checksum).
    cname : bytes
        c-blosc's compressor name (``b"lz4"``, ...); empty for zstd.
    """

    kind: int
    functions: tuple[int, ...]
    args: tuple[int, ...]
    cname: bytes = b""

    def room(self, nbytes: int) -> int:
        """Bytes a compressed box of ``nbytes`` may need (c-blosc's header, zstd's bound)."""
        if self.kind == BLOSC:
            return nbytes + 16
        # ZSTD_COMPRESSBOUND of zstd.h
        small = ((128 << 10) - nbytes) >> 11 if nbytes < (128 << 10) else 0
        return nbytes + (nbytes >> 8) + small


#: :attr:`Compressor.kind` values (``czbatch.c``'s ``CZ_BLOSC``, ``CZ_ZSTD``).
BLOSC, ZSTD = 1, 2


def _buffer(nbytes: int) -> _Buffer:
    buf = np.empty(max(nbytes, 1), np.uint8)
    return _Buffer(buf, address(buf), buf.nbytes)


def _buffers(nbytes: int, want: int) -> tuple[_Buffer, _Buffer]:
    """Scratch of this thread for a box of ``nbytes`` and a compressed frame of ``want``."""
    held = _scratch.buffers
    if held is not None and held[0].size >= nbytes and held[1].size >= want:
        return held
    pair = (_buffer(nbytes), _buffer(want))
    if nbytes <= _KEEP_SCRATCH:
        _scratch.buffers = pair
    return pair


def put_boxes(
    paths: Sequence[bytes],
    array: npt.NDArray[Any],
    starts: Sequence[Sequence[int]],
    extent: Sequence[int],
    compressor: Compressor | None,
    *,
    tag: bytes,
    first: int,
    suffix: bytes,
    exchange: bool,
    exchange_min: int,
    helpers: int = 0,
) -> list[int]:
    """Encode the boxes ``array[starts[i] : starts[i] + extent]`` and write each to ``paths[i]``.

    One call into C for the batch (``cz_put_boxes`` in ``czbatch.c``): per box, its elements
    in C order (copied into a scratch buffer unless the box is contiguous in ``array``),
    compressed by ``compressor`` (:class:`Compressor`; ``None``: stored as they are), written
    to a temporary file and moved in place exactly as :func:`put_files` does (the same names
    and status values; :data:`NOT_ENCODED` for a box the compressor refused). The helper must
    be loaded (:func:`helper`). The arguments are checked with plain integers and handed over
    as two: one ``int64`` block (integers, small arrays, the status words the call fills in)
    and one string of the NUL-ended names. This runs once per write of a few small chunks,
    where NumPy's per-call overhead was a quarter of the Python work and ctypes' conversion
    of 21 arguments cost ~7 us warm, ~70 us after the caches were flushed (two: ~2 and ~25).
    Up to ``helpers`` (at most :data:`MAX_HELPERS`) of the helper library's own threads take
    boxes alongside the calling thread (``cz_pool`` in ``czbatch.c``: they wake without the
    GIL); the files written are the same.

    Raises
    ------
    ValueError
        A box outside ``array``, an ``array`` of object dtype, or paths and starts that do
        not pair up (nothing written).
    """
    lib = helper()
    assert lib is not None, "put_boxes needs the batch helper"
    n = len(paths)
    ndim = array.ndim
    if len(starts) != n or len(extent) != ndim or ndim < 1 or array.dtype.hasobject:
        raise ValueError("put_boxes: one start per path, an extent per axis, no object dtype")
    if not 0 <= helpers <= MAX_HELPERS:
        raise ValueError(f"put_boxes: helpers must be 0-{MAX_HELPERS}, got {helpers}")
    if not n:
        return []
    box = [int(e) for e in extent]
    shape, strides = array.shape, array.strides
    base = address(array)
    sources: list[int] = []
    for start in starts:
        if len(start) != ndim:
            raise ValueError("put_boxes: one start per path, an extent per axis, no object dtype")
        at = base
        for s, e, size, stride in zip(start, box, shape, strides, strict=True):
            s = int(s)
            if s < 0 or e < 0 or s + e > size:
                raise ValueError(
                    f"put_boxes: a box of extent {tuple(box)} lies outside {array.shape}"
                )
            at += s * stride
        sources.append(at)
    c = compressor
    cname = c.cname if c else b""
    strings = b"\0".join((*paths, tag, suffix, cname)) + b"\0"
    if strings.count(0) != n + 3:
        raise ValueError("put_boxes: a name holds a NUL byte")
    at_tag = len(strings) - len(tag) - len(suffix) - len(cname) - 3
    at_suffix = at_tag + len(tag) + 1
    nbytes = math.prod(box) * array.itemsize
    scratch, packed = _buffers(nbytes, 0 if c is None else c.room(nbytes))
    functions = (
        (0,) if c is None else _zstd_functions(c.functions) if c.kind == ZSTD else c.functions
    )
    args = c.args if c else (0,)
    # cz_put_boxes' block (czbatch.c, CZ_PB_*): the integers, the arrays, n status words.
    block = array_module.array("q", [
        n, first, ndim, array.itemsize, c.kind if c else 0, int(exchange), exchange_min,
        scratch.address, scratch.size, packed.address, packed.size, at_tag, at_suffix,
        at_suffix + len(suffix) + 1, len(functions), len(args), helpers,
        *sources, *box, *strides, *functions, *args, *bytes(n),
    ])  # fmt: skip
    if lib.cz_put_boxes(block.buffer_info()[0], strings) < 0:
        raise ValueError("put_boxes: the helper refused its arguments")
    return block[len(block) - n :].tolist()
