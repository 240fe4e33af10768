"""A stand-in for ``nvidia.nvcomp`` (nvCOMP 6.0's Python API) on the CPU codec libraries.

Follows the signatures and docstrings of the real module (``help(nvcomp.Codec)``):

- ``Codec(**kwargs)`` takes the documented options and, per algorithm, only that algorithm's
  options; anything else raises ``TypeError``;
- ``decode``/``encode`` take an ``Array`` or a ``BatchArray`` (a Python list raises
  ``TypeError``: it is no declared overload), ``out=`` keeps each buffer's capacity (too
  small: ``ValueError``), and without a ``decompression_config`` a decode synchronizes the
  stream (recorded as a ``sync`` event); one built from a ``CompressConfig`` does not;
- every input and output address must have ``get_required_decompression_alignment()``;
- an output batch the caller did not provide is freed with its ``BatchArray``: its memory is
  overwritten then, so views that outlive it read garbage, as on a GPU.

``RAW`` bitstreams are the CPU libraries' (python-zstandard frames, raw deflate, gzip members,
raw LZ4 blocks, walked by a decoder of the block format like nvCOMP does); ``NVCOMP_NATIVE``
is a container of the simulator's own (opaque, like the real one). Chosen permissively
because only a GPU run can tell (``bench/gpu_check/probe_api.py``): RAW zstd accepts frames
with a content checksum and without a content size; the algorithm name ``"Gzip"`` exists.
"""

from __future__ import annotations

import enum
import gzip as _gzip
import struct
import types
import weakref
import zlib
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any

import numcodecs
import numpy as np
import zstandard

from . import _cupy
from ._events import record
from ._overloads import overloaded

ALGORITHMS = ("LZ4", "Snappy", "GDeflate", "Deflate", "Gzip", "Zstd", "Cascaded", "Bitcomp", "ANS")
_COMMON = frozenset(
    {
        "algorithm",
        "device_id",
        "cuda_stream",
        "uncomp_chunk_size",
        "bitstream_kind",
        "execution_policy",
        "checksum_policy",
        "decompress_backend",
        "use_de_sort",
    }
)
_PER_ALGORITHM = {
    "LZ4": {"data_type", "bitshuffle_mode"},
    "GDeflate": {"algorithm_type"},
    "Deflate": {"algorithm_type"},
    "Gzip": {"algorithm_type"},
    "Bitcomp": {"algorithm_type", "data_type", "mode", "delta"},
    "ANS": {
        "data_type",
        "states_per_lane",
        "histogram_reduction_log2",
        "max_sub_chunk_count",
        "skip_validate",
    },
    "Cascaded": {
        "data_type",
        "mode",
        "compression_level",
        "terminal_codecs",
        "fine_grained_encodings",
        "coarse_grained_encodings",
    },
    "Zstd": set(),
    "Snappy": set(),
}
#: Required buffer alignment (bytes) per algorithm; 16 without an algorithm.
_ALIGNMENT = {
    "Zstd": 8,
    "LZ4": 4,
    "Deflate": 4,
    "Gzip": 4,
    "Snappy": 1,
    "GDeflate": 8,
    "Cascaded": 8,
    "Bitcomp": 8,
    "ANS": 8,
}
#: Faults to inject (tests): the next ``FAULTS["decode"]`` decode calls fail as a device
#: error would (``RuntimeError``), whatever their input.
FAULTS = {"decode": 0}

#: Largest chunk RAW LZ4/Snappy/Cascaded/Bitcomp/ANS compress.
_MAX_RAW_CHUNK = 16 * 1024 * 1024


class BitstreamKind(enum.Enum):
    NVCOMP_NATIVE = 0
    RAW = 1
    WITH_UNCOMPRESSED_SIZE = 2


class ChecksumPolicy(enum.Enum):
    NO_COMPUTE_NO_VERIFY = 0
    COMPUTE_AND_NO_VERIFY = 1
    NO_COMPUTE_AND_VERIFY_IF_PRESENT = 2
    COMPUTE_AND_VERIFY_IF_PRESENT = 3
    COMPUTE_AND_VERIFY = 4


class ExecutionPolicy(enum.Enum):
    LATENCY = 0
    CONCURRENCY = 1


class ArrayBufferKind(enum.Enum):
    STRIDED_DEVICE = 0
    STRIDED_HOST = 1


class DecompressBackend(enum.Enum):
    NVCOMP_DECOMPRESS_BACKEND_DEFAULT = 0
    NVCOMP_DECOMPRESS_BACKEND_HARDWARE = 1
    NVCOMP_DECOMPRESS_BACKEND_CUDA = 2


def _incompatible(fn: str, got: Any) -> TypeError:
    return TypeError(
        f"{fn}(): incompatible function arguments. The following argument types are supported:"
        f" (Array) or (BatchArray); invoked with {type(got).__name__}"
    )


class Array:
    """A buffer on the device or the host (``nvcomp.as_array``, or a decode/encode result)."""

    def __init__(self, mem: np.ndarray, device: bool, view_of: Any = None) -> None:
        self._mem = mem  # 1-d, contiguous
        self._device = device
        # A view into a BatchArray does not keep it alive (nvCOMP: "it must not outlive it").
        self._view_of = None if view_of is None else weakref.ref(view_of)

    def _sim_device(self) -> np.ndarray:
        if not self._device:
            raise TypeError("a host nvcomp.Array is not device memory")
        return self._mem

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if not self._device:
            raise AttributeError("__cuda_array_interface__")
        return {
            "shape": self._mem.shape,
            "typestr": self._mem.dtype.str,
            "data": (self._ptr(), False),
            "strides": None,
            "version": 3,
        }

    def _ptr(self) -> int:
        return int(self._mem.__array_interface__["data"][0])

    buffer_kind = property(
        lambda self: (
            ArrayBufferKind.STRIDED_DEVICE if self._device else ArrayBufferKind.STRIDED_HOST
        )
    )
    buffer_size = property(lambda self: self._mem.nbytes)
    capacity = property(lambda self: self._mem.nbytes)
    dtype = property(lambda self: self._mem.dtype)
    item_size = property(lambda self: self._mem.itemsize)
    ndim = property(lambda self: self._mem.ndim)
    shape = property(lambda self: self._mem.shape)
    size = property(lambda self: self._mem.size)
    strides = property(lambda self: self._mem.strides)
    precision = property(lambda self: 0)

    def to_dlpack(self, cuda_stream: Any = None) -> Any:
        raise TypeError("the device simulator does not export DLPack")

    def cpu(self) -> Array:
        if not self._device:
            return self
        record("d2h", nbytes=self._mem.nbytes, pinned=False)
        return Array(self._mem.copy(), False)

    def cuda(self, synchronize: bool = True, cuda_stream: int = 0) -> Array:
        if self._device:
            return self
        record("h2d", nbytes=self._mem.nbytes, pinned=False)
        return Array(self._mem.copy(), True)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        if self._device:
            raise TypeError(_cupy._IMPLICIT)
        return self._mem


class BatchArray:
    """A batch of buffers; ``len``, indexing (views into the batch) and iteration."""

    def __init__(
        self, entries: list[np.ndarray], device: bool, *, owned: bool, keep: Any = None
    ) -> None:
        self._entries = entries
        self._device = device
        self._keep = keep  # sources kept alive (as_arrays)
        if owned:
            weakref.finalize(self, _poison, list(entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> Array:
        if not isinstance(index, int):
            raise TypeError(f"indices must be int, not {type(index).__name__}")
        record("sync", "batch-index")
        return Array(self._entries[index], self._device, view_of=self)

    @property
    def buffer_sizes(self) -> list[int]:
        record("sync", "batch-sizes")
        return [e.nbytes for e in self._entries]

    def cpu(self) -> BatchArray:
        if not self._device:
            return self
        record("d2h", nbytes=sum(e.nbytes for e in self._entries), pinned=False)
        return BatchArray([e.copy() for e in self._entries], False, owned=False)

    def cuda(self, synchronize: bool = True, cuda_stream: int = 0) -> BatchArray:
        if self._device:
            return self
        record("h2d", nbytes=sum(e.nbytes for e in self._entries), pinned=False)
        return BatchArray([e.copy() for e in self._entries], True, owned=True)


def _poison(entries: list[np.ndarray]) -> None:
    for e in entries:
        if e.flags.writeable:
            e.view(np.uint8)[...] = 0xDB


def _memory(source: Any, what: str) -> tuple[np.ndarray, bool]:
    if isinstance(source, _cupy.ndarray):
        mem, device = source._a, True
    elif isinstance(source, Array):
        mem, device = source._mem, source._device
    elif isinstance(source, np.ndarray):
        mem, device = source, False
    else:
        raise TypeError(
            f"{what}: expected an object with __cuda_array_interface__, __array_interface__ or"
            f" __dlpack__, got {type(source).__name__}"
        )
    if not mem.flags.c_contiguous:
        raise ValueError(f"{what}: a strided buffer (nvCOMP needs contiguous memory)")
    return mem.reshape(-1), device


def as_array(source: Any, cuda_stream: int = 0) -> Array:
    mem, device = _memory(source, "as_array")
    return Array(mem, device)


@overloaded("buffer, offsets, sizes, cuda_stream=0", "sources, cuda_stream=0", method=False)
def as_arrays(which: int, *args: Any) -> BatchArray:
    if which == 0:
        buffer, offsets, sizes, _stream = args
        mem, device = _memory(buffer, "as_arrays")
        if isinstance(offsets, (str, bytes)) or isinstance(sizes, (str, bytes)):
            raise TypeError("as_arrays(): offsets and sizes must be lists of int")
        offsets, sizes = [int(o) for o in offsets], [int(s) for s in sizes]
        if len(offsets) != len(sizes):
            raise ValueError(f"as_arrays(): {len(offsets)} offsets but {len(sizes)} sizes")
        raw = mem.view(np.uint8)
        entries = []
        for o, s in zip(offsets, sizes, strict=True):
            if o < 0 or s < 0 or o + s > raw.size:
                raise ValueError(
                    f"as_arrays(): entry [{o}, {o + s}) outside a {raw.size}-byte buffer"
                )
            if o % mem.itemsize or s % mem.itemsize:
                raise ValueError(
                    "as_arrays(): offsets and sizes must be multiples of the item size"
                )
            entries.append(raw[o : o + s].view(mem.dtype))
        return BatchArray(entries, device, owned=False, keep=buffer)
    sources, _stream = args
    if not isinstance(sources, list):
        raise TypeError("as_arrays(): sources must be a list")
    mems = [_memory(s, "as_arrays") for s in sources]
    if len({d for _, d in mems}) > 1:
        raise ValueError("as_arrays(): a batch mixes host and device buffers")
    return BatchArray([m for m, _ in mems], bool(mems and mems[0][1]), owned=False, keep=sources)


class CompressConfig:
    def __init__(self, codec: Codec, sizes: list[int]) -> None:
        self.codec = codec
        self.sizes = sizes


class DecompressConfig:
    def __init__(self, codec: Codec, sizes: list[int] | None) -> None:
        self.codec = codec
        self.sizes = sizes


# ---------------------------------------------------------------------- bitstreams


def _lz4_length(src: bytes, i: int, value: int, what: str) -> tuple[int, int]:
    """An LZ4 length: a 4-bit field of 15 continues in bytes until one is not 255."""
    if value != 15:
        return value, i
    while True:
        if i >= len(src):
            raise ValueError(f"truncated {what} length")
        b = src[i]
        i += 1
        value += b
        if b != 255:
            return value, i


def _lz4_block_decode(src: bytes, limit: int | None) -> bytes:
    """Decode one raw LZ4 block (the format's own rules; a malformed block raises)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        lit, i = _lz4_length(src, i + 1, token >> 4, "literal")
        if i + lit > n:
            raise ValueError("literals run past the block")
        out += src[i : i + lit]
        i += lit
        if i == n:
            break  # the last sequence has literals only
        if i + 2 > n:
            raise ValueError("truncated match offset")
        offset = src[i] | src[i + 1] << 8
        if offset == 0 or offset > len(out):
            raise ValueError(f"match offset {offset} outside the {len(out)} bytes decoded")
        mlen, i = _lz4_length(src, i + 2, token & 15, "match")
        mlen += 4
        start = len(out) - offset
        if offset >= mlen:
            out += out[start : start + mlen]
        else:  # an overlapping copy repeats the last `offset` bytes
            pattern = bytes(out[start:])
            out += (pattern * (mlen // offset + 1))[:mlen]
        if limit is not None and len(out) > limit:
            raise ValueError(f"decodes past the {limit}-byte output")
    return bytes(out)


_NATIVE_MAGIC = b"SIMNVCP1"


def _decode_stream(algorithm: str, kind: BitstreamKind, data: bytes, limit: int | None) -> bytes:
    if kind is BitstreamKind.NVCOMP_NATIVE:
        if not data.startswith(_NATIVE_MAGIC):
            raise ValueError("not an nvCOMP native stream")
        name_len = data[8]
        if data[9 : 9 + name_len].decode() != algorithm:
            raise ValueError("native stream of another algorithm")
        (size,) = struct.unpack("<Q", data[9 + name_len : 17 + name_len])
        body = zlib.decompress(data[17 + name_len :])
        if len(body) != size:
            raise ValueError("native stream size mismatch")
        return body
    if kind is not BitstreamKind.RAW:
        raise ValueError(f"the simulator has no {kind.name} bitstreams")
    if algorithm == "Zstd":
        dctx = zstandard.ZstdDecompressor()
        with dctx.stream_reader(data, read_across_frames=False) as reader:
            out = reader.read()
        params = zstandard.get_frame_parameters(data)
        if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, len(out)):
            raise ValueError("zstd frame content size mismatch")
        return out
    if algorithm == "Deflate":
        d = zlib.decompressobj(-15)
        out = d.decompress(data) + d.flush()
        if not d.eof:
            raise ValueError("truncated deflate stream")
        return out
    if algorithm == "Gzip":
        return _gzip.decompress(data)
    if algorithm == "LZ4":
        return _lz4_block_decode(data, limit)
    raise ValueError(f"the simulator has no RAW {algorithm} decoder")


def _encode_stream(algorithm: str, kind: BitstreamKind, data: bytes) -> bytes:
    if kind is BitstreamKind.NVCOMP_NATIVE:
        name = algorithm.encode()
        return (
            _NATIVE_MAGIC
            + bytes([len(name)])
            + name
            + struct.pack("<Q", len(data))
            + zlib.compress(data, 1)
        )
    if kind is not BitstreamKind.RAW:
        raise ValueError(f"the simulator has no {kind.name} bitstreams")
    if algorithm in ("LZ4", "Snappy", "Cascaded", "Bitcomp", "ANS") and len(data) > _MAX_RAW_CHUNK:
        raise ValueError(f"{algorithm}: RAW chunks are at most {_MAX_RAW_CHUNK} bytes")
    if algorithm == "Zstd":
        return zstandard.ZstdCompressor(level=1, write_content_size=True).compress(data)
    if algorithm == "Deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()
    if algorithm == "Gzip":
        return _gzip.compress(data, mtime=0)
    if algorithm == "LZ4":
        return bytes(numcodecs.LZ4().encode(data))[4:]
    raise ValueError(f"the simulator has no RAW {algorithm} encoder")


# ---------------------------------------------------------------------- Codec


class Codec:
    """nvCOMP's codec: batched decode and encode of one algorithm and bitstream kind."""

    def __init__(self, **kwargs: Any) -> None:
        algorithm = kwargs.get("algorithm", "")
        if algorithm and algorithm not in ALGORITHMS:
            raise ValueError(f"Unknown algorithm: {algorithm!r}")
        allowed = _COMMON | _PER_ALGORITHM.get(algorithm, set())
        extra = sorted(set(kwargs) - allowed)
        if extra:
            raise TypeError(
                f"Codec(): unexpected options for {algorithm or 'no algorithm'}: {extra}"
            )
        kind = kwargs.get("bitstream_kind", BitstreamKind.NVCOMP_NATIVE)
        if not isinstance(kind, BitstreamKind):
            raise TypeError(f"bitstream_kind must be a BitstreamKind, got {type(kind).__name__}")
        stream = kwargs.get("cuda_stream", 0)
        if not isinstance(stream, int) or isinstance(stream, bool):
            raise TypeError(
                f"cuda_stream must be an int (cudaStream_t), got {type(stream).__name__}"
            )
        policy = kwargs.get("checksum_policy", ChecksumPolicy.NO_COMPUTE_NO_VERIFY)
        if not isinstance(policy, ChecksumPolicy):
            raise TypeError("checksum_policy must be a ChecksumPolicy")
        if kwargs.get("device_id", 0) != 0:
            raise ValueError("the simulator has one device (0)")
        self.algorithm = algorithm
        self.kind = kind
        self.options = kwargs

    def get_required_decompression_alignment(self) -> int:
        return _ALIGNMENT.get(self.algorithm, 16)

    def get_required_compression_alignment(self) -> int:
        return _ALIGNMENT.get(self.algorithm, 16)

    def _need_algorithm(self) -> str:
        if not self.algorithm:
            raise RuntimeError("Codec without an algorithm: the simulator cannot deduce one")
        return self.algorithm

    def _check_aligned(self, mem: np.ndarray, what: str) -> None:
        align = self.get_required_decompression_alignment()
        addr = int(mem.__array_interface__["data"][0])
        if addr % align:
            raise ValueError(
                f"{what}: address {addr:#x} is not {align}-byte aligned ({self.algorithm})"
            )

    @overloaded("uncompressed_size", "uncompressed_sizes")
    def compression_config(self, which: int, sizes: int | list[int]) -> CompressConfig:
        if isinstance(sizes, int):
            sizes = [sizes]
        if not isinstance(sizes, list) or not sizes or any(int(s) <= 0 for s in sizes):
            raise ValueError("compression_config(): sizes must be positive (a non-empty list)")
        return CompressConfig(self, [int(s) for s in sizes])

    @overloaded("src", "srcs", "compression_config")
    def decompression_config(self, which: int, source: Any) -> DecompressConfig:
        if isinstance(source, CompressConfig):
            if source.codec is not self:
                raise ValueError("decompression_config(): a CompressConfig of another Codec")
            return DecompressConfig(self, source.sizes)
        if isinstance(source, (Array, BatchArray)):
            record("sync", "decompression_config")
            return DecompressConfig(self, None)
        raise _incompatible("decompression_config", source)

    def get_uncomp_buffer_size(self, source: Any) -> int:
        if not isinstance(source, Array):
            raise _incompatible("get_uncomp_buffer_size", source)
        record("sync", "get_uncomp_buffer_size")
        return len(_decode_stream(self._need_algorithm(), self.kind, source._mem.tobytes(), None))

    def get_max_comp_buffer_size(self, source: Any) -> int:
        if not isinstance(source, Array):
            raise _incompatible("get_max_comp_buffer_size", source)
        return int(source.buffer_size * 1.1) + 1024

    def _inputs(self, fn: str, src: Any) -> tuple[list[np.ndarray], bool]:
        if isinstance(src, Array):
            mems = [src._mem]
        elif isinstance(src, BatchArray):
            mems = list(src._entries)
        else:
            raise _incompatible(fn, src)
        device = src._device
        if not device:
            raise ValueError(f"{fn}(): the simulator decodes and encodes device buffers only")
        for i, m in enumerate(mems):
            self._check_aligned(m, f"{fn}() input {i}")
        return mems, isinstance(src, BatchArray)

    def _outputs(self, fn: str, results: list[bytes], out: Any, batch: bool, data_type: str) -> Any:
        if out is None:
            dt = np.dtype(data_type or "|u1")
            entries = []
            for r in results:
                if len(r) % dt.itemsize:
                    raise ValueError(f"{fn}(): {len(r)} bytes are no whole {dt} elements")
                buf = np.empty(len(r) + 16, np.uint8)  # aligned like a device allocation
                shift = (-int(buf.__array_interface__["data"][0])) % 16
                e = buf[shift : shift + len(r)]
                e[...] = np.frombuffer(r, np.uint8)
                entries.append(e.view(dt))
            record("alloc", fn, n=len(entries), nbytes=sum(len(r) for r in results))
            if not batch:
                return Array(entries[0], True)  # owns its memory
            return BatchArray(entries, True, owned=True)
        if batch:
            if not isinstance(out, BatchArray):
                raise TypeError(f"{fn}(): out must be a BatchArray for a batch")
            targets = out._entries
        else:
            targets = [_memory(out, f"{fn}() out")[0]] if not isinstance(out, Array) else [out._mem]
        if len(targets) != len(results):
            raise ValueError(f"{fn}(): out holds {len(targets)} buffers for {len(results)} results")
        sized = []
        for i, (t, r) in enumerate(zip(targets, results, strict=True)):
            raw = t.view(np.uint8)
            self._check_aligned(raw, f"{fn}() out {i}")
            if raw.nbytes < len(r):
                raise ValueError(
                    f"{fn}(): out buffer {i} holds {raw.nbytes} bytes, {len(r)} needed"
                )
            raw[: len(r)] = np.frombuffer(r, np.uint8)
            sized.append(raw[: len(r)].view(t.dtype) if len(r) % t.itemsize == 0 else raw[: len(r)])
        if batch:
            out._entries = sized
            return out
        return out

    @overloaded(
        "src, data_type='', out=None, decompression_config=None",
        "srcs, data_type='', out=None, decompression_config=None",
    )
    def decode(
        self, which: int, src: Any, data_type: str, out: Any, decompression_config: Any
    ) -> Any:
        algorithm = self._need_algorithm()
        mems, batch = self._inputs("decode", src)
        if decompression_config is None:
            record("sync", "decode-configure")
        elif not isinstance(decompression_config, DecompressConfig):
            raise TypeError("decompression_config must be a DecompressConfig")
        elif decompression_config.codec is not self:
            raise ValueError("decompression_config of another Codec")
        elif decompression_config.sizes is not None and len(decompression_config.sizes) not in (
            1,
            len(mems),
        ):
            raise ValueError("decompression_config built for another batch size")
        if FAULTS["decode"] > 0:
            FAULTS["decode"] -= 1
            raise RuntimeError("nvCOMP decode failed: simulated device fault")
        record(
            "decode",
            algorithm,
            n=len(mems),
            configured=decompression_config is not None,
            out=out is not None,
            nbytes=sum(m.nbytes for m in mems),
        )
        limits: list[int | None] = [None] * len(mems)
        if isinstance(out, BatchArray):
            limits = [e.nbytes for e in out._entries]
        results = []
        for i, m in enumerate(mems):
            try:
                results.append(
                    _decode_stream(
                        algorithm, self.kind, m.tobytes(), limits[i] if i < len(limits) else None
                    )
                )
            except Exception as exc:
                raise RuntimeError(f"nvCOMP decode failed (entry {i}): {exc}") from exc
        return self._outputs("decode", results, out, batch, data_type)

    @overloaded(
        "array, out=None, compression_config=None", "srcs, out=None, compression_config=None"
    )
    def encode(self, which: int, src: Any, out: Any, compression_config: Any) -> Any:
        algorithm = self._need_algorithm()
        mems, batch = self._inputs("encode", src)
        if compression_config is not None and not isinstance(compression_config, CompressConfig):
            raise TypeError("compression_config must be a CompressConfig")
        record("encode", algorithm, n=len(mems), nbytes=sum(m.nbytes for m in mems))
        results = [_encode_stream(algorithm, self.kind, m.tobytes()) for m in mems]
        return self._outputs("encode", results, out, batch, "")


def _make_module() -> types.ModuleType:
    mod = types.ModuleType("nvidia.nvcomp")
    mod.__spec__ = ModuleSpec("nvidia.nvcomp", None)
    mod.__dict__.update(
        __version__="6.0.0.12+sim",
        Codec=Codec,
        Array=Array,
        BatchArray=BatchArray,
        CompressConfig=CompressConfig,
        DecompressConfig=DecompressConfig,
        BitstreamKind=BitstreamKind,
        ChecksumPolicy=ChecksumPolicy,
        ExecutionPolicy=ExecutionPolicy,
        ArrayBufferKind=ArrayBufferKind,
        DecompressBackend=DecompressBackend,
        as_array=as_array,
        as_arrays=as_arrays,
    )
    return mod


module = _make_module()

__all__: Sequence[str] = ["module"]
