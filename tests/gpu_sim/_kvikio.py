"""A stand-in for ``kvikio`` (26.10): ``CuFile`` reads into simulated device buffers.

Signatures as the real module declares them (``inspect.signature(kvikio.CuFile.pread)``):
``CuFile(file, flags="r")``, ``pread(buf, size=None, file_offset=0, task_size=None) ->
IOFuture``, ``read(...) -> int``, ``pwrite`` / ``write`` alike;
``kvikio.defaults.is_compat_mode_preferred()``. The simulated machine has no GDS (compat mode,
like a machine without ``nvidia_fs``); every read is recorded as a ``cufile`` event, every
write as a ``cufile-write`` event. ``kvikio.zarr`` is in ``_kvikio_zarr``.
"""

from __future__ import annotations

import os
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import numpy as np

from . import _cupy
from ._events import record

#: Callbacks run with the path during each read (tests: a writer racing a device read).
DURING_READ: list[Any] = []


class IOFuture:
    def __init__(self, n: int) -> None:
        self._n = n

    def get(self) -> int:
        return self._n

    def done(self) -> bool:
        return True


class CuFile:
    def __init__(self, file: Path | str, flags: str = "r") -> None:
        # libkvikio's parse: the first character is "r" or "w" ("a" is refused), a "+"
        # second makes it read-write; anything after ("b" in "wb", "r+b") is ignored.
        if flags[:1] not in ("r", "w"):
            raise ValueError(f"Unknown file open flag: {flags!r}")
        if not isinstance(file, (str, Path)):
            raise TypeError(f"file must be a str or Path, got {type(file).__name__}")
        mode = os.O_RDONLY if flags[0] == "r" else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        if flags[1:2] == "+":
            mode = (mode & ~os.O_WRONLY) | os.O_RDWR
        self._fd: int | None = os.open(file, mode, 0o644)
        self._path = str(file)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> CuFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _bytes(self, buf: Any, *, writable: bool) -> np.ndarray:
        """``buf`` (a device or host array) as flat bytes; reads also need it writable."""
        if isinstance(buf, _cupy.ndarray):
            mem = buf._a
        elif isinstance(buf, np.ndarray):
            mem = buf
        else:
            raise TypeError(f"buf: expected a device or host array, got {type(buf).__name__}")
        if not mem.flags.c_contiguous or (writable and not mem.flags.writeable):
            what = "a contiguous, writable" if writable else "a contiguous"
            raise ValueError(f"buf must be {what} buffer")
        return mem.reshape(-1).view(np.uint8)

    def pread(
        self, buf: Any, size: int | None = None, file_offset: int = 0, task_size: int | None = None
    ) -> IOFuture:
        return IOFuture(self.read(buf, size, file_offset, task_size))

    def read(
        self, buf: Any, size: int | None = None, file_offset: int = 0, task_size: int | None = None
    ) -> int:
        if self._fd is None:
            raise RuntimeError("read on a closed CuFile")
        mem = self._bytes(buf, writable=True)
        n = mem.nbytes if size is None else int(size)
        if n > mem.nbytes:
            raise ValueError(f"size {n} exceeds the {mem.nbytes}-byte buffer")
        for hook in DURING_READ.copy():  # a hook may remove itself
            hook(self._path)
        data = os.pread(self._fd, n, int(file_offset))
        mem[: len(data)] = np.frombuffer(data, np.uint8)
        record(
            "cufile",
            self._path,
            nbytes=len(data),
            offset=int(file_offset),
            device=isinstance(buf, _cupy.ndarray),
        )
        return len(data)

    def pwrite(
        self, buf: Any, size: int | None = None, file_offset: int = 0, task_size: int | None = None
    ) -> IOFuture:
        return IOFuture(self.write(buf, size, file_offset, task_size))

    def write(
        self, buf: Any, size: int | None = None, file_offset: int = 0, task_size: int | None = None
    ) -> int:
        if self._fd is None:
            raise RuntimeError("write on a closed CuFile")
        data = self._bytes(buf, writable=False)
        n = data.nbytes if size is None else int(size)
        if n > data.nbytes:
            raise ValueError(f"size {n} exceeds the {data.nbytes}-byte buffer")
        view = memoryview(data[:n])
        done = 0
        while done < n:
            done += os.pwrite(self._fd, view[done:], int(file_offset) + done)
        record(
            "cufile-write",
            self._path,
            nbytes=n,
            offset=int(file_offset),
            device=isinstance(buf, _cupy.ndarray),
        )
        return n


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    return mod


defaults = _module(
    "kvikio.defaults",
    is_compat_mode_preferred=lambda: True,
    get=lambda name: {
        "compat_mode": True,
        "num_threads": 1,
        "task_size": 4 << 20,
        "gds_threshold": 16 << 10,
        "bounce_buffer_size": 16 << 20,
    }[name],
)
module = _module(
    "kvikio", __version__="26.10.00+sim", CuFile=CuFile, IOFuture=IOFuture, defaults=defaults
)
