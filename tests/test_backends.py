"""Backends run the same read and write loops: locks, conditional puts, waves, empty chunks.

The GPU backend cannot run here, but its policy can: ``WaveBackend`` is the CPU backend with the
GPU backend's grouping (whole waves, one decode and one encode call per wave, fetches on the I/O
threads). Writes through it must take the same write locks and make the same conditional puts
as writes through the CPU backend, and read back the same data: the guarantees live in the
loops, not in a backend. A structural check keeps the real GPU backend to the interface.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuzarr.backends.base import Backend, Batching, Codec, DecodeItem, Namer, Op
from cuzarr.backends.cpu import CpuBackend
from cuzarr.codecs.base import Buf
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.config import Settings
from cuzarr.engine import ArrayEngine
from cuzarr.engine import write as write_loops
from cuzarr.engine.requests import ChunkRequest
from cuzarr.metadata import parse_v3
from cuzarr.stores.base import BaseChunkStore, GetResult, PutMode, Range, StoreCaps, Suffix


class WaveBackend(CpuBackend):
    """The CPU backend grouped as the GPU backend groups: waves, one call per wave."""

    name = "waves"

    def __init__(self) -> None:
        super().__init__()
        self.decode_calls: list[int] = []
        self.encode_calls: list[int] = []

    def batching(self, codec: Codec, n: int, *, remote: bool, op: Op, threads: int) -> Batching:
        return Batching(size=max(1, n), parallel=False)

    def decode(self, codec: Codec, items: Sequence[DecodeItem], name: Namer) -> list[Any]:
        self.decode_calls.append(len(items))
        # Each item its own buffer, as device arrays are.
        out = []
        for item in items:
            chunk = np.empty(codec.shape, codec.dtype)
            super().decode(codec, [item._replace(dest=chunk)], name)
            if item.dest is not None:
                item.dest[...] = chunk
                chunk = item.dest
            out.append(chunk)
        return out

    def encode(self, codec: Codec, chunks: Sequence[Any]) -> list[Buf]:
        self.encode_calls.append(len(chunks))
        return super().encode(codec, chunks)


class VersionedStore(BaseChunkStore):
    """A dict of objects with ETag-like versions and conditional puts; records every put."""

    def __init__(self) -> None:
        self.name = "versioned://"
        self.caps = StoreCaps(remote=True, versions=True, conditional_put=True, concurrency=4)
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.puts: list[tuple[str, PutMode, str | None]] = []

    def get(
        self, key: str, byte_range: Range | Suffix | None = None, **options: Any
    ) -> GetResult | None:
        got = self.objects.get(key)
        if got is None:
            return None
        data, version = got
        if isinstance(byte_range, Suffix):
            data = data[-byte_range.length :]
        elif byte_range is not None:
            data = data[byte_range.start : byte_range.start + byte_range.length]
        return GetResult(np.frombuffer(data, np.uint8), len(got[0]), version)

    def check_writable(self) -> None:
        pass

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        self.puts.append((key, mode, version))
        if mode is PutMode.CREATE:
            assert key not in self.objects
        if mode is PutMode.UPDATE:
            assert self.objects[key][1] == version
        raw = bytes(memoryview(data))
        # The version depends on the content only, so runs that put in another order compare.
        self.objects[key] = (raw, hashlib.sha1(raw).hexdigest()[:12])

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def _engine(shards: bool, backend: Backend) -> ArrayEngine:
    codecs: list[dict[str, Any]] = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1}},
    ]
    if shards:
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {"chunk_shape": [4, 4], "codecs": codecs},
            }
        ]
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [16, 16],
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
    }
    spec = parse_v3(doc, path="a")
    settings = Settings(threads=2)
    return ArrayEngine(spec, build_chunk_codec(spec), settings, backend=backend)


def _requests(region: tuple[slice, slice]) -> list[ChunkRequest]:
    """Requests of ``region`` over an 8x8 grid of 16x16 (what an indexer would make)."""
    out = []
    for ci in range(2):
        for cj in range(2):
            lo = (max(region[0].start, ci * 8), max(region[1].start, cj * 8))
            hi = (min(region[0].stop, ci * 8 + 8), min(region[1].stop, cj * 8 + 8))
            if lo[0] >= hi[0] or lo[1] >= hi[1]:
                continue
            chunk_sel = (
                slice(lo[0] - ci * 8, hi[0] - ci * 8),
                slice(lo[1] - cj * 8, hi[1] - cj * 8),
            )
            out_sel = (
                slice(lo[0] - region[0].start, hi[0] - region[0].start),
                slice(lo[1] - region[1].start, hi[1] - region[1].start),
            )
            complete = hi[0] - lo[0] == 8 and hi[1] - lo[1] == 8
            out.append(ChunkRequest(key=f"a/c/{ci}/{cj}", chunk_selection=chunk_sel,
                                    out_selection=out_sel, complete=complete))
    return out


@contextmanager
def _recorded_locks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    taken: list[tuple[str, ...]] = []
    real = write_loops.write_locks

    @contextmanager
    def record(store: Any, keys: Any) -> Iterator[None]:
        keys = tuple(sorted(keys))
        taken.append(keys)
        with real(store, keys):
            yield

    monkeypatch.setattr(write_loops, "write_locks", record)
    yield taken


def _write_sequence(engine: ArrayEngine, store: VersionedStore) -> np.ndarray:
    """A whole write, then two partial ones (read-modify-writes); the array's expected values."""
    expected = np.zeros((16, 16), np.int32)
    data = np.arange(256, dtype=np.int32).reshape(16, 16)
    engine.write(store, _requests((slice(0, 16), slice(0, 16))), data)
    expected[...] = data
    patch = np.full((6, 10), -7, np.int32)
    engine.write(store, _requests((slice(3, 9), slice(5, 15))), patch)
    expected[3:9, 5:15] = patch
    engine.write(store, _requests((slice(12, 16), slice(0, 4))), np.zeros((4, 4), np.int32))
    expected[12:16, 0:4] = 0
    return expected


@pytest.mark.parametrize("shards", [False, True])
def test_wave_writes_take_the_same_locks_and_conditional_puts(
    shards: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = {}
    for name, backend in (("cpu", CpuBackend()), ("waves", WaveBackend())):
        store = VersionedStore()
        engine = _engine(shards, backend)
        with _recorded_locks(monkeypatch) as taken:
            expected = _write_sequence(engine, store)
        out = np.empty((16, 16), np.int32)
        engine.read(store, _requests((slice(0, 16), slice(0, 16))), out)
        np.testing.assert_array_equal(out, expected)
        locked = sorted({k for keys in taken for k in keys})
        runs[name] = (locked, sorted(store.puts, key=repr), store.objects)
    cpu, waves = runs["cpu"], runs["waves"]
    assert cpu[0] == waves[0] and cpu[0], "the same keys were locked"
    assert cpu[1] == waves[1], "the same puts, with the same modes and versions"
    # Read-modify-writes were conditional on what they read: updates against its version.
    modes = {mode for _key, mode, _version in cpu[1]}
    assert PutMode.UPDATE in modes
    assert all(version is not None for _k, mode, version in cpu[1] if mode is PutMode.UPDATE)
    assert {k: v[0] for k, v in cpu[2].items()} == {k: v[0] for k, v in waves[2].items()}


def test_wave_backend_encodes_a_wave_in_one_call() -> None:
    backend = WaveBackend()
    engine = _engine(True, backend)
    store = VersionedStore()
    engine.write(store, _requests((slice(0, 16), slice(0, 16))), np.ones((16, 16), np.int32))
    # 4 shards of 2x2 inner chunks: one encode call for the 16 inner chunks of the wave.
    assert backend.encode_calls == [16]
    out = np.empty((16, 16), np.int32)
    engine.read(store, _requests((slice(0, 16), slice(0, 16))), out)
    assert backend.decode_calls == [16]
    assert (out == 1).all()


def test_gpu_backend_is_only_a_backend() -> None:
    """cuzarr/gpu/backend.py implements the interface and nothing of the loops."""
    path = Path(__file__).resolve().parents[1] / "src" / "cuzarr" / "gpu" / "backend.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GpuBackend")
    public = {
        n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    }
    interface = {
        n for n in dir(Backend) if not n.startswith("_") and callable(getattr(Backend, n, None))
    }
    assert public - interface <= {"chain"}, public - interface
    assert interface - {"name", "xp"} <= public
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cuzarr")
    }
    assert not any(m.startswith(("cuzarr.engine", "cuzarr.stores.")) and m != "cuzarr.stores.base"
                   for m in imported), imported
