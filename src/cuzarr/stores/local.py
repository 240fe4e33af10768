"""Local folders: positional reads from worker threads, atomic writes (``stores/replace.py``)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr import _native
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import ReadOnlyError, StoreError
from cuzarr.stores import replace
from cuzarr.stores.base import (
    BaseChunkStore,
    BoxBatch,
    BufferPool,
    Coalescing,
    GetResult,
    ObjectReader,
    PutMode,
    Range,
    Scratch,
    StoreCaps,
    Suffix,
    check_pieces,
)
from cuzarr.stores.replace import EXCHANGE_MIN, TEMP_SUFFIX

__all__ = ["EXCHANGE_MIN", "TEMP_SUFFIX", "LocalChunkStore", "check_key", "file_version"]

_BAD_SEGMENTS = frozenset(("", ".", ".."))
#: Keys of ASCII letters, digits, ``_`` and ``-`` in segments of dot-joined runs (zarr's chunk
#: keys, ``c/3/14/15`` or ``3.14.15``): none of them is empty or absolute, has an empty, ``.``
#: or ``..`` segment, a backslash or a NUL, so of :func:`check_key`'s tests only the
#: temporary-file suffix is left to make (one match, ~0.2 us, against ~0.4 us a key for them
#: all; the check runs once per chunk of a batch).
_PLAIN_KEY = re.compile(r"[\w-]+(?:\.[\w-]+)*(?:/[\w-]+(?:\.[\w-]+)*)*", re.ASCII)
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL
#: ``GetResult`` from a tuple without the Python-level ``__new__`` (small reads are hot).
_result = GetResult._make
#: Writes a batch of files in one call into C (:meth:`LocalChunkStore.put_many`,
#: :func:`cuzarr._native.put_files`); ``None`` without the batch helper. Tests that fail ``os``
#: calls to fault :meth:`put` set it to ``None``.
_put_files: Callable[..., list[int]] | None = (
    _native.put_files if _native.helper() is not None else None
)
#: Encodes and writes a batch of boxes in one call into C (:meth:`LocalChunkStore.put_boxes`,
#: :func:`cuzarr._native.put_boxes`); ``None`` without the batch helper.
_put_boxes: Callable[..., list[int]] | None = (
    _native.put_boxes if _native.helper() is not None else None
)
_SUFFIX = os.fsencode(TEMP_SUFFIX)


def check_key(key: str, store: str = "the store") -> str:
    """Return ``key`` if it names a file below the store root, else raise.

    Keys come from metadata and user paths, so from untrusted input: a key may not be empty,
    absolute, hold ``.`` or ``..`` or empty segments, backslashes or NUL bytes, and may not end
    with the temporary-file suffix.

    Raises
    ------
    StoreError
        Naming the key and the store.
    """
    if _PLAIN_KEY.fullmatch(key) is not None and not key.endswith(TEMP_SUFFIX):
        return key
    if (
        not key
        or key[0] == "/"
        or "\\" in key
        or "\0" in key
        or not _BAD_SEGMENTS.isdisjoint(key.split("/"))
        or key.endswith(TEMP_SUFFIX)
        or os.path.isabs(key)
    ):
        raise StoreError(
            f"Refusing key {key!r} in {store}: keys must be relative paths below the store root "
            "without '.', '..' or empty segments, backslashes or NUL bytes"
        )
    return key


def _pread_exact(fd: int, out: memoryview, offset: int) -> int:
    """Fill ``out`` from ``offset``; return the bytes read (short only at end of file)."""
    pos = 0
    n = len(out)
    while pos < n:
        got = os.preadv(fd, [out[pos:]], offset + pos)
        if got == 0:
            break
        pos += got
    return pos


def _write_all(fd: int, view: memoryview) -> None:
    """Write all of ``view`` at the file position of ``fd``."""
    pos = 0
    while pos < len(view):
        pos += os.write(fd, view[pos:])


#: ``errno`` values with which ``copy_file_range`` says it cannot copy between these files
#: (old kernels, some file systems): the bytes are then read and written here.
_NO_KERNEL_COPY = frozenset(
    (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM)
)


def _copy_range(src: int, dst: int, start: int, length: int) -> None:
    """Append bytes ``[start, start + length)`` of file ``src`` to ``dst`` (at its position).

    Raises
    ------
    OSError
        If ``src`` ends before ``start + length`` (it changed under its reader).
    """
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < length:
        got = 0
        if kernel:
            try:
                got = os.copy_file_range(src, dst, length - done, start + done)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                kernel = False
        if not kernel:
            data = os.pread(src, min(length - done, 1 << 22), start + done)
            _write_all(dst, memoryview(data))
            got = len(data)
        if got == 0:
            raise OSError(errno.EIO, f"the source file ended {length - done} bytes early")
        done += got


def file_version(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file's version as an open object's ``token`` says it: device, inode, size, mtime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _FileReader:
    """An open local file: ranges read through one descriptor see one version of the file."""

    __slots__ = ("fd", "size", "token")

    def __init__(self, fd: int) -> None:
        #: The descriptor (:meth:`LocalChunkStore.put_spliced` copies from it).
        self.fd = fd
        st = os.fstat(fd)
        self.size = st.st_size
        # Writes replace files by rename, so a new version is a new inode.
        self.token: object = file_version(st)

    def read(self, ranges: list[tuple[int, int]]) -> list[Buf]:
        out: list[Buf] = []
        for start, length in ranges:
            n = max(0, min(length, self.size - start))
            buf = np.empty(n, np.uint8)
            got = _pread_exact(self.fd, memoryview(buf), start)
            out.append(buf[:got])
        return out

    def close(self) -> None:
        os.close(self.fd)


class LocalChunkStore(BaseChunkStore):
    """Chunks as files below ``root``.

    Parameters
    ----------
    root : str or Path
        The store's root folder.
    read_only : bool
        Refuse writes.
    """

    def __init__(self, root: str | Path, *, read_only: bool = False) -> None:
        self.root = Path(root)
        #: The root as a string ending in the separator: keys are appended to it (a join of a
        #: ``Path`` converts it on every call, and small writes are hot).
        self._prefix = os.path.join(os.fspath(self.root), "")
        self.read_only = read_only
        #: Whether replaced files are swapped in (:func:`exchange`): decided from the file
        #: system (:func:`swaps_help`) by the first replacement of a large file (``None``
        #: until then), off once the file system refuses.
        self._exchange: bool | None = None
        self.name = self.root.as_uri() if self.root.is_absolute() else str(self.root)
        self.caps = StoreCaps(
            read_into=True,
            open_object=True,
            small_reads=True,
            device_reads=True,
            box_puts=_put_boxes is not None,
            # Cross-process write locks for this folder (cuzarr.engine.locks.file_locks).
            lock_root=os.path.realpath(self.root),
        )

    def _path(self, key: str) -> str:
        return self._prefix + check_key(key, self.name)

    def _open_existing(self, key: str) -> int | None:
        """A read-only descriptor of the file of ``key``, or ``None`` if it does not exist."""
        try:
            return os.open(self._path(key), os.O_RDONLY)
        except _MISSING:
            return None

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        *,
        if_match: str | None = None,
        scratch: Scratch | BufferPool | None = None,
        size_hint: int | None = None,
        fresh: bool = False,
    ) -> GetResult | None:
        """Read a file, or a range of it (into the thread's scratch buffer when given).

        With ``size_hint`` and no range, a file of at most that size is read with one ``read``
        call (no size lookup); a larger one is then read whole as usual.
        """
        fd = self._open_existing(key)
        if fd is None:
            return None
        try:
            if size_hint is not None and byte_range is None:
                data = os.read(fd, size_hint + 1)
                if len(data) <= size_hint:
                    return _result((data, len(data), None))
            size = os.fstat(fd).st_size
            if byte_range is None:
                start, n = 0, size
            elif isinstance(byte_range, Suffix):
                start = max(0, size - byte_range.length)
                n = size - start
            else:
                # A hostile shard index may ask for absurd lengths: never allocate past the file.
                start, n = byte_range.start, max(0, min(byte_range.length, size - byte_range.start))
            buf = scratch.get(n) if scratch is not None else np.empty(n, np.uint8)
            got = _pread_exact(fd, memoryview(buf), start)
            return _result((buf[:got], size, None))
        finally:
            os.close(fd)

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """Small files, each with one ``read`` call when at most ``size_hint`` bytes."""
        if size_hint is None:
            return super().get_many(keys)
        out: list[Buf | None] = []
        limit = size_hint + 1
        for key in keys:
            fd = self._open_existing(key)
            if fd is None:
                out.append(None)
                continue
            try:
                data = os.read(fd, limit)
            finally:
                os.close(fd)
            if len(data) == limit:  # larger than expected: read it whole
                got = self.get(key)
                out.append(None if got is None else got.data)
            else:
                out.append(data)
        return out

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Read a file straight into ``out`` (no intermediate buffer)."""
        fd = self._open_existing(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            if size == out.nbytes:
                _pread_exact(fd, memoryview(out), 0)
            return size
        finally:
            os.close(fd)

    def file_paths(self, keys: Sequence[str]) -> list[bytes]:
        """The paths of the files of ``keys`` (checked keys; existence not looked up)."""
        prefix, name, encode = self._prefix, self.name, os.fsencode
        return [encode(prefix + check_key(key, name)) for key in keys]

    def local_file(self, key: str) -> str | None:
        """The file of ``key``, or ``None`` if it does not exist."""
        path = self._path(key)
        return path if os.path.isfile(path) else None

    def open_object(self, key: str) -> _FileReader | None:
        """Open a file for ranged reads of one version (``None`` if missing)."""
        fd = self._open_existing(key)
        if fd is None:
            return None
        try:
            return _FileReader(fd)
        except BaseException:
            os.close(fd)
            raise

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Read byte ranges with positional reads on one open file."""
        reader = self.open_object(key)
        if reader is None:
            return None
        try:
            return list(reader.read(list(ranges)))
        finally:
            reader.close()

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        if self.read_only:
            raise ReadOnlyError(
                f"store was opened in read-only mode and does not support writing ({self.name})"
            )

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Write to a temporary file in the same folder, then move it to the key atomically.

        By a rename, or, for an object of at least :data:`EXCHANGE_MIN` bytes replacing an
        existing regular file, by swapping the two files (:func:`exchange`); the old one is then
        removed on a background thread before :meth:`settle` returns. Readers see the old or
        the new file either way. Local folders have no conditional puts: read-modify-writes
        are serialized by the engine's write locks (threads and processes), so every mode
        overwrites.
        """
        view = memoryview(as_u8(data))

        def fill(fd: int) -> None:
            _write_all(fd, view)

        self._put_via(key, fill, len(view))

    def put_spliced(self, key: str, source: ObjectReader, pieces: Sequence[Range | Buf]) -> None:
        """Write ``key`` as :meth:`put` does, its ranges copied from ``source`` in the kernel.

        ``source`` must be one of this store's open files (:meth:`open_object`); a range is
        copied with ``copy_file_range`` (read and written here where the file system refuses
        it), so the kept bytes of a shard never pass through this process.
        """
        if not isinstance(source, _FileReader):
            raise TypeError(f"put_spliced: {type(source).__name__} is not a file of {self.name}")
        check_pieces(source.size, pieces)
        total = sum(p.length if isinstance(p, Range) else memoryview(p).nbytes for p in pieces)

        def fill(fd: int) -> None:
            for p in pieces:
                if isinstance(p, Range):
                    _copy_range(source.fd, fd, p.start, p.length)
                else:
                    _write_all(fd, memoryview(as_u8(p)))

        self._put_via(key, fill, total)

    def _put_via(self, key: str, fill: Callable[[int], None], nbytes: int) -> None:
        """Create a temporary file, ``fill(fd)`` it, move it to ``key`` (see :meth:`put`)."""
        path = self._path(key)
        tmp = replace.temp_names.next(path)
        try:
            try:
                fd = os.open(tmp, _CREATE, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(tmp, _CREATE, 0o644)
            except FileExistsError:
                tmp = replace.temp_names.next(path)  # a leftover of a process with the same token
                fd = os.open(tmp, _CREATE, 0o644)
            try:
                fill(fd)
            finally:
                os.close(fd)
            swapped = None
            large = nbytes >= EXCHANGE_MIN
            if (
                self._exchange is not False
                and large
                and replace.is_regular_file(path)
                and self._swaps(path)
            ):
                swapped = replace.exchange(tmp, path)
                if swapped is None:
                    self._exchange = False
            if swapped:
                replace.remover.remove(tmp)  # the temporary name now holds the old file
            else:
                os.replace(tmp, path)
        except BaseException as exc:
            replace.remove_quietly(tmp)
            if not isinstance(exc, OSError):
                raise
            # Every failure (permissions, full disk, a file where a folder should be) names the
            # key and the store; no temporary file is left behind.
            raise StoreError(f"Failed to write chunk '{key}' in {self.name}: {exc}") from exc

    def put_many(self, keys: Sequence[str], blobs: Sequence[Buf]) -> None:
        """Write files as :meth:`put` does, the batch in one call into C where it can.

        With the batch helper (:func:`cuzarr._native.put_files`) every file of the batch is
        created, written and moved in place without the GIL, instead of one handoff of the
        GIL per system call: the same temporary names, swaps and renames as :meth:`put`.
        The helper makes the folders missing on the way to a file (as ``os.makedirs``), and
        files in folders it could not make get one more try from here; a file
        the helper still cannot write is written by :meth:`put`, which names what failed.
        """
        if _put_files is None or not keys:
            super().put_many(keys, blobs)
            return
        paths = [self._path(key) for key in keys]
        views = [as_u8(b) for b in blobs]
        views = [v if v.flags.c_contiguous else np.ascontiguousarray(v) for v in views]
        large = any(v.nbytes >= EXCHANGE_MIN for v in views)

        def write(names: list[bytes], which: Sequence[int], **how: Any) -> list[int]:
            assert _put_files is not None
            return _put_files(names, [views[i] for i in which], **how)

        for i in self._put_batch(paths, large, write):
            self.put(keys[i], blobs[i])

    def put_boxes(self, keys: Sequence[str], boxes: BoxBatch) -> list[int]:
        """Encode boxes of an array and write each file in one call into C (``box_puts``).

        :func:`cuzarr._native.put_boxes`: per box a copy into C order, c-blosc or libzstd
        (or nothing), and the temporary file and move of :meth:`put`, the GIL released for
        the batch. Returns the positions of the boxes not written (the caller encodes and
        puts those the general way, which names what failed); every other file is written
        whole.
        """
        if not keys:
            return []
        if _put_boxes is None:
            return list(range(len(keys)))
        paths = [self._path(key) for key in keys]
        large = boxes.nbytes >= EXCHANGE_MIN

        def write(names: list[bytes], which: Sequence[int], **how: Any) -> list[int]:
            assert _put_boxes is not None
            return _put_boxes(
                names, boxes.array, [boxes.starts[i] for i in which], boxes.extent,
                boxes.compressor, helpers=boxes.helpers, **how,
            )

        return self._put_batch(paths, large, write)

    def _put_batch(
        self, paths: Sequence[str], large: bool, write: Callable[..., list[int]]
    ) -> list[int]:
        """Write the files at ``paths`` by ``write`` (a batch call); positions not written.

        Folders the helper could not make get one more try from here.
        """
        failed = self._put_files(paths, range(len(paths)), large, write)
        missing = [i for i, code in failed if code == -errno.ENOENT]
        if missing:
            for folder in {os.path.dirname(paths[i]) for i in missing}:
                with contextlib.suppress(OSError):  # put() names what is wrong
                    os.makedirs(folder, exist_ok=True)
            failed = [x for x in failed if x[1] != -errno.ENOENT]
            failed += self._put_files(paths, missing, large, write)
        return sorted(i for i, _code in failed)

    def _swaps(self, probe: str) -> bool:
        """Whether this store swaps replaced files in.

        Decided on the first ask from the file system of ``probe`` (an existing path in the
        store, :func:`~cuzarr.stores.replace.swaps_help`).
        """
        if self._exchange is None:
            self._exchange = replace.swaps_help(probe)
        return self._exchange

    def _put_files(
        self,
        paths: Sequence[str],
        which: Sequence[int],
        large: bool,
        write: Callable[..., list[int]],
    ) -> list[tuple[int, int]]:
        """Write the files ``which`` in one call; ``(position, status)`` of those not written.

        Hands swapped-out old files to the remover, and stops asking for swaps where the file
        system refuses them.
        """
        swaps = self._exchange
        if swaps is None and large:
            # Decided on the folder of a file this batch may replace (if it exists yet).
            folder = os.path.dirname(paths[which[0]])
            if os.path.isdir(folder):
                swaps = self._swaps(folder)
        tag, first = replace.temp_names.reserve(len(which))
        encode = os.fsencode
        status = write(
            [encode(paths[i]) for i in which], which,
            tag=encode(tag), first=first, suffix=_SUFFIX, exchange=bool(swaps),
            exchange_min=EXCHANGE_MIN,
        )
        failed = []
        for j, code in enumerate(status):
            if code == 1:
                replace.remover.remove(f"{paths[which[j]]}{tag}{first + j:x}{TEMP_SUFFIX}")
            elif code == 2:
                self._exchange = False
            elif code < 0:
                failed.append((which[j], code))
        return failed

    def settle(self) -> None:
        """Wait until the old files that :meth:`put` swapped out are removed."""
        replace.remover.drain()

    def delete(self, key: str) -> None:
        """Remove a file if it exists."""
        with contextlib.suppress(*_MISSING):
            os.remove(self._path(key))

    def list_dir(self, prefix: str) -> list[str]:
        """Entries (files and folders) of the folder ``prefix``, sorted."""
        base = prefix.strip("/")
        folder = os.path.join(self.root, base) if base else str(self.root)
        try:
            with os.scandir(folder) as entries:
                return sorted(e.name for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every file below the folder ``prefix`` with its size, in-progress writes included."""
        base = prefix.strip("/")
        top = os.path.join(self.root, base) if base else str(self.root)
        out: list[tuple[str, int]] = []
        for folder, _dirs, files in os.walk(top):
            rel = os.path.relpath(folder, self.root)
            head = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # removed while listing
                    out.append((head + name, os.stat(os.path.join(folder, name)).st_size))
        return sorted(out)
