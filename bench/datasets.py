"""The generated datasets of the comparison: their layouts, data, and writing them once.

Eight from the performance issues (``a`` .. ``h``, the default run) and three for the
independent check (``i`` .. ``k``: other layouts, run on request).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.matrix import SEED, ZARR_PIPELINES


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataset:
    """One generated array.

    Attributes
    ----------
    key : str
        ``a`` .. ``h`` (``a`` .. ``f`` from the first performance issue, ``g`` and ``h``
        from the second), ``i`` .. ``k`` (the independent check).
    description : str
        Human-readable layout.
    source : str
        Name of the ``.npy`` file holding the expected data (in C order; an array of another
        shape with as many elements reads it reshaped, :meth:`expected`).
    shape, chunks, shards
        Array shape, (inner) chunk shape, shard shape or ``None``.
    dtype : str
        NumPy dtype name.
    codec : {"zstd", "blosc", "blosc-lz4", "none"}
        Compressor (``blosc``: blosc zstd level 3; ``blosc-lz4``: blosc lz4 level 5; both
        with byte shuffle).
    """

    key: str
    description: str
    source: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codec: str

    def expected(self, data_dir: Path) -> np.ndarray:
        """The expected values: the source ``.npy`` in ``data_dir``, mapped, in this shape."""
        return np.load(data_dir / f"{self.source}.npy", mmap_mode="r").reshape(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def nchunks(self) -> int:
        return math.prod(-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True))

    def chunk_regions(self) -> Iterator[tuple[slice, ...]]:
        """Regions of the (inner) chunks in C order of the grid, clipped to the shape."""
        grid = [range(-(-n // c)) for n, c in zip(self.shape, self.chunks, strict=True)]
        for idx in itertools.product(*grid):
            yield tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(idx, self.chunks, self.shape, strict=True)
            )

    def partial_block(self) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """``(block, region)``: the first shard (unsharded: a 4-chunk-edge block) and the
        first half of it along every axis, the region a partial overwrite writes."""
        edge = self.shards or tuple(
            min(n, 4 * c) for n, c in zip(self.shape, self.chunks, strict=True)
        )
        edge = tuple(min(e, n) for e, n in zip(edge, self.shape, strict=True))
        block = tuple(slice(0, e) for e in edge)
        region = tuple(slice(0, max(e // 2, 1)) for e in edge)
        return block, region

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "description": self.description,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "chunks": list(self.chunks),
            "shards": None if self.shards is None else list(self.shards),
            "codec": self.codec,
            "nbytes": self.nbytes,
            "nchunks": self.nchunks,
        }


def _cap(shape: Sequence[int], chunk: int) -> tuple[int, ...]:
    return tuple(min(chunk, n) for n in shape)


def datasets_for(size: int) -> dict[str, Dataset]:
    """The datasets for a cube of edge ``size`` (512 in the full run).

    (e) is a cube of edge ``size // 2`` in 16^3 chunks; (f) a ``16 size`` square float32 image
    in 512x512 chunks (8192^2 at 512: as many bytes as the cube); (g) the cube in shards of
    small inner chunks of a fast codec; (h) the cube in blosc with lz4. Chunk and shard shapes
    are capped to the array; shards stay a multiple of the inner chunks.

    The independent check, where ``size`` is a multiple of 8: (i) the cube's values as a 5-D
    microscopy stack (TCZYX ``4 x 2 x size/8 x size x size``) in ``1 x 1 x 16 x 128 x 128``
    chunks of blosc lz4, as OME-Zarr writes them; (j) a float32 climate grid (time x lat x
    lon, ``size/4 x 3 size/4 + 1 x 3 size/2``) in chunks that do not divide it (partial edge
    chunks along latitude), zstd; (k) the cube's values as a 4-D stack
    (``8 x size/8 x size x size``) in ``1 x size/8 x size/2 x size/2`` shards of
    ``1 x 16 x 32 x 32`` zstd chunks (16 KiB).
    """
    if size < 2:
        raise ValueError(f"size: expected an integer >= 2, got {size}")
    cube = (size,) * 3
    inner = min(32, size)
    shard = min(256, -(-size // inner) * inner)
    small_inner = min(16, size)
    small_shard = min(256, -(-size // small_inner) * small_inner)
    small = (max(size // 2, 1),) * 3
    image = (16 * size,) * 2
    c64 = _cap(cube, 64)
    sets = {
        "a": Dataset(
            key="a",
            description="64^3 chunks, zstd(3)",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="zstd",
        ),
        "b": Dataset(
            key="b",
            description="32^3 chunks in 256^3 shards, zstd(3)",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=(inner,) * 3,
            shards=(shard,) * 3,
            codec="zstd",
        ),
        "c": Dataset(
            key="c",
            description="64^3 chunks, blosc zstd(3)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="blosc",
        ),
        "d": Dataset(
            key="d",
            description="64^3 chunks, uncompressed",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="none",
        ),
        "e": Dataset(
            key="e",
            description=f"{small[0]}^3 in 16^3 chunks (8 KiB), zstd(3)",
            source="small",
            shape=small,
            dtype="uint16",
            chunks=_cap(small, 16),
            shards=None,
            codec="zstd",
        ),
        "f": Dataset(
            key="f",
            description="2-D float32 image, 512x512 chunks, zstd(3)",
            source="image",
            shape=image,
            dtype="float32",
            chunks=_cap(image, 512),
            shards=None,
            codec="zstd",
        ),
        "g": Dataset(
            key="g",
            description="16^3 chunks (8 KiB) in 256^3 shards, blosc lz4(5)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=(small_inner,) * 3,
            shards=(small_shard,) * 3,
            codec="blosc-lz4",
        ),
        "h": Dataset(
            key="h",
            description="64^3 chunks, blosc lz4(5)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="blosc-lz4",
        ),
    }
    if size % 8 == 0:
        sets.update(_extra_datasets(size))
    return sets


def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def _extra_datasets(size: int) -> dict[str, Dataset]:
    """(i), (j), (k) of :func:`datasets_for` (``size`` a multiple of 8)."""
    stack = (4, 2, size // 8, size, size)
    grid = (max(size // 4, 1), 3 * size // 4 + 1, 3 * size // 2)
    grid_chunks = (min(16, grid[0]), 3 * size // 16 + 1, 3 * size // 8)
    four = (8, size // 8, size, size)
    four_inner = (1, min(16, size // 8), min(32, size), min(32, size))
    # A multiple of the inner chunks, within the array.
    half = max(size // 2 // four_inner[2], 1) * four_inner[2]
    four_shards = (1, -(-(size // 8) // four_inner[1]) * four_inner[1], half, half)
    stack_chunks = (1, 1, min(16, stack[2]), *_cap(stack[3:], 128))
    return {
        "i": Dataset(
            key="i",
            description=f"5-D TCZYX stack, {_shape(stack_chunks)} chunks, blosc lz4(5)+shuffle",
            source="cube",
            shape=stack,
            dtype="uint16",
            chunks=stack_chunks,
            shards=None,
            codec="blosc-lz4",
        ),
        "j": Dataset(
            key="j",
            description=f"float32 time x lat x lon grid, {_shape(grid_chunks)} "
            "chunks (partial at the edge), zstd(3)",
            source="grid",
            shape=grid,
            dtype="float32",
            chunks=grid_chunks,
            shards=None,
            codec="zstd",
        ),
        "k": Dataset(
            key="k",
            description=f"4-D stack, {_shape(four_inner)} chunks in {_shape(four_shards)} "
            "shards, zstd(3)",
            source="cube",
            shape=four,
            dtype="uint16",
            chunks=four_inner,
            shards=four_shards,
            codec="zstd",
        ),
    }


def make_grid(shape: tuple[int, int, int], *, seed: int = SEED) -> np.ndarray:
    """A ``(time, lat, lon)`` float32 field: a pattern drifting in time, noise, quarter steps."""
    rng = np.random.default_rng(seed)
    t, ny, nx = shape
    lat = np.linspace(-90.0, 90.0, ny, dtype=np.float32)[:, None]
    lon = np.linspace(0.0, 360.0, nx, endpoint=False, dtype=np.float32)[None, :]
    out = np.empty(shape, np.float32)
    for i in range(t):
        base = 250.0 + 40.0 * np.cos(np.radians(lat)) + 5.0 * np.sin(np.radians(lon + 3.0 * i))
        noise = rng.integers(0, 16, (ny, nx)).astype(np.float32)
        out[i] = np.round((base + noise * 0.25) * 4.0) / 4.0
    return out


def make_image(edge: int, *, seed: int = SEED) -> np.ndarray:
    """A ``(edge, edge)`` float32 image: a smooth gradient plus noise, in quarter steps."""
    rng = np.random.default_rng(seed)
    out = np.empty((edge, edge), np.float32)
    rows = max(1, (1 << 22) // edge)
    cols = np.arange(edge, dtype=np.float32)
    for r in range(0, edge, rows):
        stop = min(r + rows, edge)
        y = np.arange(r, stop, dtype=np.float32)[:, None]
        noise = rng.integers(0, 64, (stop - r, edge)).astype(np.float32)
        out[r:stop] = (y * 0.5 + cols * 0.25 + noise) * 0.25
    return out


def _codecs(ds: Dataset) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, ZstdCodec

    if ds.codec == "zstd":
        return {"compressors": ZstdCodec(level=3)}
    if ds.codec == "blosc":
        return {"compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")}
    if ds.codec == "blosc-lz4":
        return {"compressors": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")}
    return {"compressors": None}


def create_array(ds: Dataset, path: Path) -> Any:
    """Create ``ds``'s (empty) array at ``path`` with zarr-python; return the zarr array."""
    import zarr

    return zarr.create_array(
        store=zarr.storage.LocalStore(path),
        shape=ds.shape,
        dtype=ds.dtype,
        chunks=ds.chunks,
        shards=ds.shards,
        zarr_format=3,
        overwrite=True,
        **_codecs(ds),
    )


def generate(root: Path, size: int, keys: Sequence[str], progress: Callable[[str], None]) -> None:
    """Write the expected data (``.npy``) and the arrays of ``keys`` under ``root``.

    Reuses what a previous run left there when its manifest matches (same size and seed).
    """
    from cuzarr.benchmark import make_data

    manifest = root / "manifest.json"
    done: dict[str, Any] = {}
    if manifest.exists():
        done = json.loads(manifest.read_text())
        if done.get("size") != size or done.get("seed") != SEED:
            done = {}
    done.setdefault("size", size)
    done.setdefault("seed", SEED)
    done.setdefault("arrays", [])
    root.mkdir(parents=True, exist_ok=True)
    sets = datasets_for(size)
    makers = {
        "cube": lambda: make_data(size, seed=SEED),
        "small": lambda: make_data(sets["e"].shape[0], seed=SEED + 1),
        "image": lambda: make_image(sets["f"].shape[0], seed=SEED + 2),
        "grid": lambda: make_grid(sets["j"].shape, seed=SEED + 3),
    }
    import zarr

    for key in keys:
        ds = sets[key]
        if key in done["arrays"] and (root / f"{key}.zarr").exists():
            continue
        npy = root / f"{ds.source}.npy"
        if npy.exists():
            data = np.load(npy, mmap_mode="r")
        else:
            progress(f"generating {ds.source} data {ds.shape} {ds.dtype}")
            data = makers[ds.source]()
            np.save(npy, data)
        progress(f"writing dataset ({key}) {ds.description} with zarr's default pipeline")
        with zarr.config.set({"codec_pipeline.path": ZARR_PIPELINES["zarr"]}):
            create_array(ds, root / f"{key}.zarr")[...] = np.asarray(data).reshape(ds.shape)
        done["arrays"].append(key)
        manifest.write_text(json.dumps(done))
