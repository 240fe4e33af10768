"""Running zarr-python code under either pipeline, listing stores, comparing arrays.

>>> import zarr
>>> from cuzarr.testing import use_pipeline
>>> with use_pipeline("cuzarr", strict=True):
...     arr = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), dtype="i4")
...     arr[:] = 7

cuzarr's :class:`~cuzarr.Pipeline` captures its settings when zarr creates the array object, so
create and open arrays inside the ``use_pipeline`` block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    pass

__all__ = [
    "CUZARR_PIPELINE",
    "METADATA_KEYS",
    "ZARR_PIPELINE",
    "PipelineName",
    "assert_same_array",
    "chunk_keys",
    "sample_values",
    "stored_items",
    "stored_keys",
    "use_pipeline",
]

#: zarr-python's default codec pipeline.
ZARR_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"
#: cuzarr's codec pipeline.
CUZARR_PIPELINE = "cuzarr.Pipeline"

#: Names of metadata documents (v2 and v3), as opposed to chunk keys.
METADATA_KEYS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})

PipelineName = Literal["zarr", "cuzarr"]
SelectionKind = Literal["basic", "oindex", "vindex", "blocks"]


@contextlib.contextmanager
def use_pipeline(name: PipelineName, *, strict: bool = True, **settings: Any) -> Iterator[None]:
    """Route zarr-python through one codec pipeline inside a ``with`` block.

    Parameters
    ----------
    name : {"zarr", "cuzarr"}
        zarr-python's default ``BatchedCodecPipeline`` or ``cuzarr.Pipeline``.
    strict : bool, default True
        For ``"cuzarr"``: raise :class:`~cuzarr.UnsupportedError` instead of falling back.
    **settings
        Other :func:`cuzarr.configure` options (``threads=``, ...), for ``"cuzarr"`` only.

    Yields
    ------
    None
        zarr's ``codec_pipeline.path`` and cuzarr's settings are restored on exit.
    """
    import zarr

    if name == "zarr":
        if settings:
            raise TypeError("cuzarr settings only apply to the 'cuzarr' pipeline")
        previous = zarr.config.get("codec_pipeline.path")
        zarr.config.set({"codec_pipeline.path": ZARR_PIPELINE})
        try:
            yield
        finally:
            zarr.config.set({"codec_pipeline.path": previous})
    elif name == "cuzarr":
        from cuzarr.config import configure

        with configure(strict=strict, **settings):
            yield
    else:
        raise ValueError(f"unknown pipeline {name!r}: expected 'zarr' or 'cuzarr'")


# ---------------------------------------------------------------------- stores


def _run[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion, from sync code or from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def stored_keys(store: Any, prefix: str = "") -> set[str]:
    """Every key a zarr store holds under ``prefix``.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store.
    prefix : str, default ""
        Key prefix, e.g. ``"group/array/"``.

    Returns
    -------
    set of str
        Full keys (metadata documents and chunks).
    """

    async def collect() -> set[str]:
        return {key async for key in store.list_prefix(prefix)}

    return _run(collect())


def chunk_keys(store: Any, prefix: str = "") -> set[str]:
    """The keys under ``prefix`` that are not metadata documents (see :data:`METADATA_KEYS`)."""
    return {k for k in stored_keys(store, prefix) if k.rsplit("/", 1)[-1] not in METADATA_KEYS}


def stored_items(store: Any, prefix: str = "") -> dict[str, bytes]:
    """Every key under ``prefix`` with its stored bytes."""
    from zarr.core.buffer import default_buffer_prototype

    keys = sorted(stored_keys(store, prefix))

    async def collect() -> dict[str, bytes]:
        proto = default_buffer_prototype()
        items: dict[str, bytes] = {}
        for key in keys:
            value = await store.get(key, proto)
            if value is not None:
                items[key] = value.to_bytes()
        return items

    return _run(collect())


# ---------------------------------------------------------------------- data


def sample_values(
    dtype: npt.DTypeLike, shape: tuple[int, ...], *, seed: int = 0
) -> npt.NDArray[Any]:
    """Varied test values of ``dtype``: extremes, and for floats NaN, -0.0 and infinities.

    Parameters
    ----------
    dtype : dtype_like
        Any bool, integer, float, complex, datetime64, timedelta64 or fixed-width string dtype
        (either byte order).
    shape : tuple of int
        Shape of the result.
    seed : int, default 0
        Seed of the random generator.

    Returns
    -------
    numpy.ndarray
        Values of exactly ``dtype``.
    """
    dt = np.dtype(dtype)
    native = dt.newbyteorder("=")
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    values: npt.NDArray[Any]
    if dt.kind == "b":
        values = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(native)
        values = rng.integers(info.min, info.max, n, dtype=native, endpoint=True)
        values[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    elif dt.kind in "fc":
        real = rng.standard_normal(n) * 100
        values = real + 1j * rng.standard_normal(n) if dt.kind == "c" else real
        values = values.astype(native)
        specials = np.array([np.nan, -0.0, np.inf, -np.inf, 0.0], dtype=native)[:n]
        values[: specials.size] = specials
    elif dt.kind in "mM":
        values = rng.integers(-(10**9), 10**9, n).astype(native)
        values[: min(n, 1)] = np.array(["NaT"], dtype=native)[: min(n, 1)]
    elif dt.kind in "SU":
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        width = dt.itemsize if dt.kind == "S" else dt.itemsize // 4
        words = ["".join(rng.choice(letters, rng.integers(0, width + 1))) for _ in range(n)]
        values = np.array(words, dtype=native)
    else:
        raise TypeError(f"sample_values does not generate {dt}")
    return values.reshape(shape).astype(dt)


# ---------------------------------------------------------------------- comparisons


def _native(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


def assert_same_array(
    actual: Any, expected: Any, *, check_dtype: bool = True, msg: str = ""
) -> None:
    """Assert two arrays are identical: shape, dtype and every element's bits.

    NaN payloads, ``-0.0`` versus ``0.0`` and ``NaT`` all count; byte order does not (values
    are compared in native order), but with ``check_dtype`` the dtypes must match exactly
    (except that a NumPy scalar ``actual`` is always native-endian).

    Parameters
    ----------
    actual, expected : array_like
        Arrays or scalars (0-d results of zarr come back as NumPy scalars).
    check_dtype : bool, default True
        Also require equal dtypes (including byte order).
    msg : str, optional
        Prefix of the failure message.

    Raises
    ------
    AssertionError
        On any difference.
    """
    a = np.asarray(actual)
    e = np.asarray(expected)
    if isinstance(actual, np.generic) and e.dtype.kind not in "OUST" and e.dtype.fields is None:
        # NumPy scalars (zarr's result for a scalar selection) are always native-endian
        e = _native(e)
    where = f"{msg}: " if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{where}shape {a.shape} != expected {e.shape}")
    if check_dtype and a.dtype != e.dtype:
        raise AssertionError(f"{where}dtype {a.dtype.str} != expected {e.dtype.str}")
    if a.dtype.kind in "OUST" or a.dtype.fields is not None:
        np.testing.assert_array_equal(a, e, err_msg=where)
        return
    a = _native(a)
    e = _native(e)
    if a.dtype != e.dtype:
        e = e.astype(a.dtype)
    ab = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, a.dtype.itemsize)
    eb = np.ascontiguousarray(e).reshape(-1).view(np.uint8).reshape(e.size, e.dtype.itemsize)
    same = (ab == eb).all(axis=1)
    if not same.all():
        bad = np.flatnonzero(~same)
        idx = np.unravel_index(bad[0], a.shape) if a.ndim else ()
        raise AssertionError(
            f"{where}{bad.size} of {a.size} elements differ in their bits; first at index "
            f"{tuple(int(i) for i in idx)}: {a[idx]!r} != expected {e[idx]!r}"
        )


# ---------------------------------------------------------------------- selections
