"""Benchmark zarr-python's codec pipelines against cuzarr's: the library behind ``cuzarr bench``.

With no target, :func:`run_benchmark` writes a seeded, realistic dataset (a smooth ``uint16``
ramp plus noise 0..63, which compresses about 2x with zstd) as Zarr v3 arrays on a local store,
in two layouts (plain 64^3 chunks and 32^3 chunks in 256^3 shards, both zstd level 3). Each
engine in :data:`ENGINES` then reads the whole array and writes the whole array, best of
``repeats``. With a target, :func:`run_target_benchmark` times whole-array reads of an
existing array only.

Every engine is selected through zarr's ``codec_pipeline.path`` setting before its arrays are
opened, and the pipeline zarr actually built is checked. Every read is compared with the data
that was written, and every array an engine wrote is read back through zarr's default pipeline
and compared: a mismatch raises :class:`BenchmarkError`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from cuzarr import diagnostics
from cuzarr.bench_device import on_device, on_host, read_all, resolve_device
from cuzarr.bench_report import (
    BASELINE_NAME,
    BenchReport,
    Measurement,
    environment_info,
    format_report,
)
from cuzarr.config import configure
from cuzarr.errors import CuzarrError

__all__ = [
    "BASELINE",
    "CUZARR",
    "ENGINES",
    "BenchReport",
    "BenchmarkError",
    "Engine",
    "Layout",
    "Measurement",
    "default_layouts",
    "environment_info",
    "format_report",
    "make_data",
    "run_benchmark",
    "run_target_benchmark",
]

Progress = Callable[[str], None]
Operation = Literal["read", "write"]


class BenchmarkError(CuzarrError):
    """A benchmark could not run, or an engine returned or stored wrong data."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    """One codec pipeline to measure.

    Attributes
    ----------
    name : str
        Short name shown in the table.
    pipeline_path : str
        Value of zarr's ``codec_pipeline.path`` that selects it.
    """

    name: str
    pipeline_path: str

    def pipeline_class(self) -> type:
        """Import and return the class ``pipeline_path`` names."""
        module, _, attr = self.pipeline_path.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
        assert isinstance(cls, type)
        return cls


#: zarr-python's default pipeline, the reference every ratio is taken against.
BASELINE = Engine(
    name=BASELINE_NAME, pipeline_path="zarr.core.codec_pipeline.BatchedCodecPipeline"
)

#: The engines measured, in table order.
ENGINES: tuple[Engine, ...] = (
    BASELINE,
    Engine(name="zarr-fused", pipeline_path="zarr.core.codec_pipeline.FusedCodecPipeline"),
    Engine(name="cuzarr", pipeline_path="cuzarr.Pipeline"),
)
#: cuzarr's engine, the one ``device`` applies to.
CUZARR = ENGINES[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How the generated array is chunked.

    Attributes
    ----------
    name : str
        Short name (also the array's folder name).
    chunks : tuple of int
        Chunk shape, or the inner chunk shape when ``shards`` is set.
    shards : tuple of int or None
        Shard shape, or ``None`` for an unsharded array.
    zstd_level : int
        Level of the zstd codec.
    """

    name: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None
    zstd_level: int = 3

    def describe(self) -> str:
        """Human-readable summary, e.g. ``32^3 in 256^3 shards, zstd(3)``."""
        text = _shape_text(self.chunks) + " chunks"
        if self.shards is not None:
            text = f"{_shape_text(self.chunks)} in {_shape_text(self.shards)} shards"
        return f"{text}, zstd({self.zstd_level})"


def _shape_text(shape: Sequence[int]) -> str:
    if len(set(shape)) == 1:
        return f"{shape[0]}^{len(shape)}"
    return "x".join(str(s) for s in shape)


def default_layouts(size: int) -> tuple[Layout, Layout]:
    """Return the two generated layouts for a cube of edge ``size``.

    Parameters
    ----------
    size : int
        Edge length of the cube.

    Returns
    -------
    tuple of Layout
        64^3 chunks, and 32^3 inner chunks in 256^3 shards (each capped to the array, shards
        kept a multiple of the inner chunk).
    """
    chunk = min(64, size)
    inner = min(32, size)
    shard = min(256, -(-size // inner) * inner)
    return (
        Layout(name="chunked", chunks=(chunk,) * 3),
        Layout(name="sharded", chunks=(inner,) * 3, shards=(shard,) * 3),
    )


def make_data(size: int, *, seed: int = 0) -> npt.NDArray[np.uint16]:
    """Generate the benchmark cube: a smooth ``uint16`` ramp plus noise 0..63.

    Parameters
    ----------
    size : int
        Edge length; the result has shape ``(size, size, size)``.
    seed : int, optional
        Seed of the noise.

    Returns
    -------
    numpy.ndarray
        ``(arange(n) // 256 + noise) mod 2**16`` reshaped to a cube; compresses about 2x with
        zstd. Generated in slabs, so peak memory stays near the result's size.
    """
    if size < 1:
        raise ValueError(f"size: expected an integer >= 1, got {size!r}")
    n = size**3
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.uint16)
    step = 1 << 22
    for start in range(0, n, step):
        stop = min(start + step, n)
        ramp = np.arange(start, stop, dtype=np.uint64) // 256
        noise = rng.integers(0, 64, stop - start, dtype=np.uint64)
        out[start:stop] = (ramp + noise).astype(np.uint16)  # wraps modulo 2**16
    return out.reshape(size, size, size)


@contextlib.contextmanager
def _engine_context(
    engine: Engine, threads: int | None, strict: bool, device: str = "auto"
) -> Iterator[None]:
    """Select ``engine`` as zarr's codec pipeline (open arrays inside, not before).

    cuzarr's engine decodes and encodes on ``device`` (:class:`~cuzarr.config.configure`:
    ``"gpu"`` also switches zarr to its GPU buffers); the other engines run as zarr runs them.
    """
    import zarr

    options: dict[str, Any] = {"codec_pipeline.path": engine.pipeline_path}
    if threads is not None:
        options["threading.max_workers"] = threads
    with contextlib.ExitStack() as stack:
        if engine.pipeline_path == CUZARR.pipeline_path:
            stack.enter_context(configure(device=device, threads=threads, strict=strict))
        stack.enter_context(zarr.config.set(options))
        yield


def _device_of(engine: Engine, device: str) -> str:
    """Where ``engine`` runs: ``device`` for cuzarr's, the CPU for zarr's own pipelines."""
    return device if engine.pipeline_path == CUZARR.pipeline_path else "cpu"


def _checked_pipeline(arr: Any, engine: Engine) -> str:
    """Return the pipeline class zarr built for ``arr``; raise if it is not ``engine``'s."""
    pipeline = arr.async_array.codec_pipeline
    cls = type(pipeline)
    if cls is not engine.pipeline_class():
        raise BenchmarkError(
            f"engine {engine.name!r}: zarr built a {cls.__module__}.{cls.__qualname__}, "
            f"not {engine.pipeline_path} (the codec_pipeline.path setting did not take effect)"
        )
    return f"{cls.__module__}.{cls.__qualname__}"


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _check_equal(actual: Any, expected: npt.NDArray[Any], what: str) -> None:
    actual = np.asarray(actual)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise BenchmarkError(
            f"{what}: got shape {actual.shape} dtype {actual.dtype}, "
            f"expected shape {expected.shape} dtype {expected.dtype}"
        )
    if not np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc"):
        bad = int(np.count_nonzero(actual != expected))
        raise BenchmarkError(f"{what}: {bad} of {expected.size} elements differ from the data")


def _measure_read(
    engine: Engine,
    path: Path | str,
    expected: npt.NDArray[Any],
    layout: str,
    *,
    repeats: int,
    threads: int | None,
    strict: bool,
    device: str,
) -> Measurement:
    import zarr

    times: list[float] = []
    with _engine_context(engine, threads, strict, device):
        arr = zarr.open_array(store=str(path), mode="r")
        pipeline = _checked_pipeline(arr, engine)
        read = read_all(arr, _device_of(engine, device))
        for i in range(repeats):
            seconds, got = _timed(read)
            _check_equal(
                on_host(got), expected, f"{engine.name} read of {layout} (repeat {i + 1})"
            )
            del got
            times.append(seconds)
    return Measurement(
        engine=engine.name,
        pipeline=pipeline,
        layout=layout,
        operation="read",
        nbytes=expected.nbytes,
        seconds=tuple(times),
    )


def _create_array(path: Path, data: npt.NDArray[Any], layout: Layout) -> Any:
    import zarr
    from zarr.codecs import ZstdCodec

    return zarr.create_array(
        store=zarr.storage.LocalStore(path),
        shape=data.shape,
        dtype=data.dtype,
        chunks=layout.chunks,
        shards=layout.shards,
        compressors=ZstdCodec(level=layout.zstd_level),
        zarr_format=3,
        overwrite=True,
    )


def _measure_write(
    engine: Engine,
    path: Path,
    data: npt.NDArray[Any],
    layout: Layout,
    *,
    repeats: int,
    threads: int | None,
    strict: bool,
    device: str,
) -> Measurement:
    import zarr

    times: list[float] = []
    value = on_device(data, _device_of(engine, device))
    with _engine_context(engine, threads, strict, device):
        arr = _create_array(path, data, layout)
        pipeline = _checked_pipeline(arr, engine)
        for _ in range(repeats):
            seconds, _unused = _timed(lambda: arr.__setitem__(Ellipsis, value))
            times.append(seconds)
    # An independent check: zarr's default pipeline reads back what this engine wrote.
    with _engine_context(BASELINE, None, strict=False):
        back = zarr.open_array(store=str(path), mode="r")[...]
    _check_equal(back, data, f"{engine.name} write of {layout.describe()} (read back by zarr)")
    return Measurement(
        engine=engine.name,
        pipeline=pipeline,
        layout=layout.describe(),
        operation="write",
        nbytes=data.nbytes,
        seconds=tuple(times),
    )


def _noop(_message: str) -> None:
    pass


def run_benchmark(
    *,
    size: int = 512,
    repeats: int = 3,
    threads: int | None = None,
    keep: Path | str | None = None,
    engines: Sequence[Engine] = ENGINES,
    seed: int = 0,
    progress: Progress = _noop,
    device: str | None = None,
) -> BenchReport:
    """Benchmark whole-array reads and writes of a generated dataset with every engine.

    Parameters
    ----------
    size : int, optional
        Edge length of the ``uint16`` cube (512: 268 MB decoded).
    repeats : int, optional
        Repeats per measurement; the fastest counts.
    threads : int, optional
        Worker threads for every engine (zarr's ``threading.max_workers`` and cuzarr's
        ``threads``); ``None`` leaves each engine's default.
    keep : path, optional
        Folder to write the dataset to and keep; by default a temporary folder, removed after.
    engines : sequence of Engine, optional
        Engines to measure; the baseline is added first when missing.
    seed : int, optional
        Seed of the data's noise.
    progress : callable, optional
        Called with one line of text per step.
    device : {"auto", "cpu", "gpu"}, optional
        Where cuzarr's engine decodes and encodes (``"gpu"``: zarr's GPU buffers, CuPy results
        and values, as ``cuzarr.configure(device="gpu")`` makes them); the other engines run
        on the CPU. ``None``: the settings' device (``CUZARR_DEVICE``, else ``"auto"``).

    Returns
    -------
    BenchReport
        The measurements; ``verified`` is ``True`` (a mismatch raises instead).

    Raises
    ------
    BenchmarkError
        When an engine read or wrote wrong data, or zarr did not build the requested pipeline.
    """
    if repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    device = resolve_device(device)
    if BASELINE not in engines:
        engines = (BASELINE, *engines)
    layouts = default_layouts(size)
    progress(f"generating a {size}^3 uint16 cube ({size**3 * 2 / 1e6:.1f} MB, seed {seed})")
    data = make_data(size, seed=seed)

    with contextlib.ExitStack() as stack:
        if keep is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cuzarr-bench-")))
        else:
            root = Path(keep)
            root.mkdir(parents=True, exist_ok=True)
        measurements: list[Measurement] = []
        diagnostics.reset_stats()
        for layout in layouts:
            source = root / f"{layout.name}.zarr"
            progress(f"writing {source} ({layout.describe()}) with zarr's default pipeline")
            with _engine_context(BASELINE, threads, strict=False):
                _create_array(source, data, layout)[...] = data
            for engine in engines:
                progress(f"{engine.name}: read all, {layout.describe()}, {repeats}x")
                measurements.append(
                    _measure_read(
                        engine,
                        source,
                        data,
                        layout.describe(),
                        repeats=repeats,
                        threads=threads,
                        strict=True,
                        device=device,
                    )
                )
            for engine in engines:
                progress(f"{engine.name}: write all, {layout.describe()}, {repeats}x")
                scratch = root / f"{layout.name}-written-by-{engine.name}.zarr"
                try:
                    measurements.append(
                        _measure_write(
                            engine,
                            scratch,
                            data,
                            layout,
                            repeats=repeats,
                            threads=threads,
                            strict=True,
                            device=device,
                        )
                    )
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
        cuzarr_stats = diagnostics.stats()

    return BenchReport(
        dataset={
            "generated": True,
            "path": None if keep is None else str(Path(keep).resolve()),
            "shape": list(data.shape),
            "dtype": str(data.dtype),
            "nbytes": int(data.nbytes),
            "seed": seed,
            "layouts": [
                {
                    "name": lay.name,
                    "description": lay.describe(),
                    "chunks": list(lay.chunks),
                    "shards": None if lay.shards is None else list(lay.shards),
                    "codec": f"zstd(level={lay.zstd_level})",
                }
                for lay in layouts
            ],
        },
        measurements=tuple(measurements),
        repeats=repeats,
        threads=threads,
        device=device,
        verified=True,
        cuzarr_stats=cuzarr_stats,
        environment=environment_info(),
    )


def _describe_array(arr: Any) -> str:
    meta = arr.metadata
    shards = getattr(arr, "shards", None)
    text = f"zarr v{meta.zarr_format}, {_shape_text(arr.chunks)} chunks"
    if shards is not None:
        text = f"zarr v{meta.zarr_format}, {_shape_text(arr.chunks)} in "
        text += f"{_shape_text(shards)} shards"
    codecs = [type(c).__name__ for c in (*arr.filters, *arr.compressors)]
    if codecs:
        text += ", " + "+".join(codecs)
    return text


def run_target_benchmark(
    target: Path | str,
    *,
    repeats: int = 3,
    threads: int | None = None,
    engines: Sequence[Engine] = ENGINES,
    progress: Progress = _noop,
    device: str | None = None,
) -> BenchReport:
    """Benchmark whole-array reads of an existing array with every engine.

    The baseline engine reads first; every other engine's result is compared with its data.
    The whole array is held in memory (twice, briefly).

    Parameters
    ----------
    target : path or str
        The array (a local path, or any store string zarr opens).
    repeats : int, optional
        Repeats per measurement; the fastest counts.
    threads : int, optional
        Worker threads for every engine; ``None`` leaves each engine's default.
    engines : sequence of Engine, optional
        Engines to measure; the baseline is added first when missing.
    progress : callable, optional
        Called with one line of text per step.
    device : {"auto", "cpu", "gpu"}, optional
        Where cuzarr's engine decodes (as :func:`run_benchmark`'s).

    Returns
    -------
    BenchReport
        Read measurements only. cuzarr runs without ``strict``: what it hands to zarr's
        pipeline shows in ``cuzarr_stats``.

    Raises
    ------
    BenchmarkError
        When an engine read data that differs from the baseline's.
    """
    import zarr

    if repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    device = resolve_device(device)
    engines = (BASELINE, *(e for e in engines if e != BASELINE))
    with _engine_context(BASELINE, threads, strict=False):
        arr = zarr.open_array(store=str(target), mode="r")
        layout = _describe_array(arr)
        progress(f"{BASELINE.name}: reading {target} ({layout}) for reference")
        expected = np.asarray(arr[...])
    diagnostics.reset_stats()
    measurements: list[Measurement] = []
    for engine in engines:
        progress(f"{engine.name}: read all, {layout}, {repeats}x")
        measurements.append(
            _measure_read(
                engine,
                target,
                expected,
                layout,
                repeats=repeats,
                threads=threads,
                strict=False,
                device=device,
            )
        )
    return BenchReport(
        dataset={
            "generated": False,
            "path": str(target),
            "shape": list(expected.shape),
            "dtype": str(expected.dtype),
            "nbytes": int(expected.nbytes),
            "layouts": [{"description": layout}],
        },
        measurements=tuple(measurements),
        repeats=repeats,
        threads=threads,
        device=device,
        verified=True,
        cuzarr_stats=diagnostics.stats(),
        environment=environment_info(),
    )
