"""A stand-in for ``kvikio.zarr`` (kvikio 26.10): ``GDSStore``, zarr's ``LocalStore`` over kvikio.

Behaviour modelled on what the real class does (kvikio-cu13 26.10.0, examined with
``inspect``; written here from that description, not copied): ``GDSStore`` subclasses
``zarr.storage.LocalStore``, keeps its constructor ``(root, *, read_only=False)`` and every
other method, and defines ``get``, ``set`` and ``_set`` (and ``__repr__``) of its own:

- ``get(key, prototype=None, byte_range=None)``: the requested bytes of ``root / key`` (a
  whole file, an offset, a range or a suffix, clamped to the file's size) read with
  ``CuFile(path).pread`` into a new buffer of the caller's prototype, which is device memory
  under ``zarr.config.enable_gpu()``; ``None`` for a missing file.
- ``set`` / ``_set(key, value, exclusive=False)``: parent folders created, then the file
  rewritten in place (truncated, same inode; not an atomic replace) through
  ``CuFile(path, "wb").write``; ``exclusive`` refuses an existing file.

Reads and writes go through the simulated ``kvikio.CuFile`` (:mod:`._kvikio`), so they are
recorded as ``cufile`` / ``cufile-write`` events.
"""

from __future__ import annotations

import asyncio
import os
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import zarr.storage
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.buffer.core import default_buffer_prototype

from . import _kvikio


def _span(size: int, request: ByteRequest | None) -> tuple[int, int]:
    """``(offset, nbytes)`` of a byte request on a file of ``size`` bytes, clamped to it."""
    if request is None:
        offset, n = 0, size
    elif isinstance(request, OffsetByteRequest):
        offset, n = request.offset, size - request.offset
    elif isinstance(request, RangeByteRequest):
        offset, n = request.start, request.end - request.start
    elif isinstance(request, SuffixByteRequest):
        offset, n = size - request.suffix, request.suffix
    else:
        raise TypeError(f"Unexpected byte_range, got {request}")
    offset = min(max(offset, 0), size)
    return offset, max(0, min(n, size))


def _read(path: Path, prototype: BufferPrototype, request: ByteRequest | None) -> Buffer:
    offset, n = _span(os.path.getsize(path), request)
    target = prototype.nd_buffer.create(shape=(n,), dtype="B").as_ndarray_like()
    with _kvikio.CuFile(path) as f:
        f.pread(target, size=n, file_offset=offset).get()
    return prototype.buffer.from_array_like(target)


def _write(path: Path, value: Buffer, exclusive: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if exclusive and path.exists():
        raise FileExistsError(f"File exists: {path}")
    with _kvikio.CuFile(path, "wb") as f:
        f.write(value.as_array_like())


class GDSStore(zarr.storage.LocalStore):
    """``LocalStore`` whose reads land in buffers of the caller's prototype through kvikio."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self}')"

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        if not self._is_open:
            await self._open()
        proto = default_buffer_prototype() if prototype is None else prototype
        try:
            return await asyncio.to_thread(_read, self.root / key, proto, byte_range)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def set(self, key: str, value: Buffer) -> None:
        await self._set(key, value)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        if not self._is_open:
            await self._open()
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"GDSStore.set(): value must be a Buffer, got {type(value)}")
        await asyncio.to_thread(_write, self.root / key, value, exclusive)


module = types.ModuleType("kvikio.zarr")
module.__spec__ = ModuleSpec("kvikio.zarr", None)
module.__dict__.update(GDSStore=GDSStore, __all__=["GDSStore"])
