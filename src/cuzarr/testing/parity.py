"""The parity check: the same writes through zarr's pipeline and cuzarr's, then every read.

Selections (basic, orthogonal, vectorized, block) apply to zarr arrays and to NumPy models
alike; :func:`check_parity` writes the same sequence through both pipelines into two stores,
then checks identical stored keys and every cross-read against the NumPy model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt

from cuzarr.testing.arrays import (
    assert_same_array,
    stored_items,
    stored_keys,
    use_pipeline,
)

if TYPE_CHECKING:
    from zarr.core.array_spec import ArrayConfigParams

__all__ = [
    "Append",
    "ParityResult",
    "Resize",
    "Selection",
    "SelectionKind",
    "Step",
    "Write",
    "check_parity",
    "model_get",
    "model_set",
    "read",
    "write",
]

SelectionKind = Literal["basic", "oindex", "vindex", "blocks"]


@dataclass(frozen=True, slots=True)
class Selection:
    """A selection of one kind, applicable to zarr arrays and NumPy models alike.

    Attributes
    ----------
    kind : {"basic", "oindex", "vindex", "blocks"}
        ``arr[sel]``, ``arr.oindex[sel]``, ``arr.vindex[sel]`` or ``arr.blocks[sel]``.
    sel : object
        The selection itself.
    """

    kind: SelectionKind
    sel: Any

    def __repr__(self) -> str:
        return f"{self.kind}[{self.sel!r}]"


def _expand(sel: Any, ndim: int) -> tuple[Any, ...]:
    """``sel`` as a tuple of one entry per axis (ellipsis expanded)."""
    items = sel if isinstance(sel, tuple) else (sel,)
    n_ell = sum(1 for s in items if s is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis")
    if n_ell:
        i = next(i for i, s in enumerate(items) if s is Ellipsis)
        fill = (slice(None),) * (ndim - len(items) + 1)
        items = items[:i] + fill + items[i + 1 :]
    return tuple(items) + (slice(None),) * (ndim - len(items))


def _orthogonal(sel: Any, shape: tuple[int, ...]) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """NumPy ``np.ix_`` index and dropped axes equivalent to zarr's orthogonal ``sel``."""
    arrays: list[npt.NDArray[np.intp]] = []
    drop: list[int] = []
    for ax, s in enumerate(_expand(sel, len(shape))):
        if isinstance(s, slice):
            arrays.append(np.arange(shape[ax])[s])
        elif isinstance(s, (int, np.integer)):
            arrays.append(np.array([int(s) % shape[ax]]))
            drop.append(ax)
        else:
            a = np.asarray(s)
            arrays.append(np.flatnonzero(a) if a.dtype == bool else a.astype(np.intp))
    return np.ix_(*arrays), tuple(drop)


def _blocks(sel: Any, shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    """The basic selection of ``arr.blocks[sel]``."""
    out: list[slice] = []
    for ax, s in enumerate(_expand(sel, len(shape))):
        c, n = chunks[ax], shape[ax]
        nblocks = math.ceil(n / c) if c else 0
        if isinstance(s, slice):
            if s.step not in (None, 1):
                raise IndexError("block slices must have step 1")
            start, stop, _ = s.indices(nblocks)
            out.append(slice(start * c, min(max(stop, start) * c, n)))
        else:
            b = int(s) % nblocks
            out.append(slice(b * c, min((b + 1) * c, n)))
    return tuple(out)


def model_get(
    model: npt.NDArray[Any], selection: Selection, chunks: tuple[int, ...]
) -> npt.NDArray[Any]:
    """Apply ``selection`` to a NumPy model of the array (zarr's semantics, NumPy's code).

    ``chunks`` is the shape of a block of ``arr.blocks`` (the shard shape when sharded).
    """
    kind, sel = selection.kind, selection.sel
    if kind in ("basic", "vindex"):
        result = model[sel]
    elif kind == "oindex":
        ix, drop = _orthogonal(sel, model.shape)
        result = model[ix].squeeze(axis=drop) if drop else model[ix]
    else:
        result = model[_blocks(sel, model.shape, chunks)]
    # NumPy scalars are native-endian whatever the array's byte order; keep the array's dtype
    return np.asarray(result, dtype=model.dtype)


def model_set(
    model: npt.NDArray[Any], selection: Selection, value: Any, chunks: tuple[int, ...]
) -> None:
    """Write ``value`` at ``selection`` into the NumPy model (zarr's semantics)."""
    kind, sel = selection.kind, selection.sel
    if kind in ("basic", "vindex"):
        model[sel] = value
    elif kind == "oindex":
        ix, drop = _orthogonal(sel, model.shape)
        v = np.asarray(value)
        model[ix] = np.expand_dims(v, drop) if drop and v.ndim else v
    else:
        model[_blocks(sel, model.shape, chunks)] = value


def read(arr: Any, selection: Selection) -> Any:
    """``arr[sel]`` / ``arr.oindex[sel]`` / ``arr.vindex[sel]`` / ``arr.blocks[sel]``."""
    kind, sel = selection.kind, selection.sel
    if kind == "basic":
        return arr[sel]
    return getattr(arr, kind)[sel]


def write(arr: Any, selection: Selection, value: Any) -> None:
    """Write through the selection's kind of indexing."""
    kind, sel = selection.kind, selection.sel
    if kind == "basic":
        arr[sel] = value
    else:
        getattr(arr, kind)[sel] = value


@dataclass(frozen=True, slots=True)
class Write:
    """One step of a write sequence: ``value`` written at ``selection``.

    Attributes
    ----------
    selection : Selection or object
        Where to write; a bare object means a basic selection.
    value : object
        A scalar or an array broadcastable to the selection.
    """

    selection: Any
    value: Any

    @property
    def where(self) -> Selection:
        """The selection as a :class:`Selection`."""
        s = self.selection
        return s if isinstance(s, Selection) else Selection("basic", s)

    def apply(self, arr: Any) -> None:
        """Write into a zarr array."""
        write(arr, self.where, self.value)

    def apply_model(
        self, model: npt.NDArray[Any], fill: Any, chunks: tuple[int, ...]
    ) -> npt.NDArray[Any]:
        """Write into the NumPy model (in place) and return it."""
        model_set(model, self.where, self.value, chunks)
        return model


@dataclass(frozen=True, slots=True)
class Resize:
    """A step that resizes the array (zarr deletes chunks outside the new shape)."""

    shape: tuple[int, ...]

    def apply(self, arr: Any) -> None:
        """Resize a zarr array."""
        arr.resize(self.shape)

    def apply_model(
        self, model: npt.NDArray[Any], fill: Any, chunks: tuple[int, ...]
    ) -> npt.NDArray[Any]:
        """The model resized: the overlap kept, new elements the fill value."""
        out = np.full(self.shape, fill, dtype=model.dtype)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(model.shape, self.shape, strict=True))
        out[overlap] = model[overlap]
        return out


@dataclass(frozen=True, slots=True)
class Append:
    """A step that appends ``data`` along ``axis``."""

    data: Any
    axis: int = 0

    def apply(self, arr: Any) -> None:
        """Append to a zarr array."""
        arr.append(self.data, axis=self.axis)

    def apply_model(
        self, model: npt.NDArray[Any], fill: Any, chunks: tuple[int, ...]
    ) -> npt.NDArray[Any]:
        """The model with ``data`` appended."""
        return np.concatenate([model, np.asarray(self.data, dtype=model.dtype)], axis=self.axis)


#: A step of a sequence run by :func:`check_parity`.
Step = Write | Resize | Append


# ---------------------------------------------------------------------- parity


@dataclass(slots=True)
class ParityResult:
    """What :func:`check_parity` found (for further assertions).

    Attributes
    ----------
    model : numpy.ndarray
        The expected array.
    keys : set of str
        The keys both stores hold under the array's prefix.
    stats : dict
        ``cuzarr.stats()`` counters accumulated while cuzarr wrote and read.
    zarr_store, cuzarr_store : zarr.abc.store.Store
        Store A (written by zarr's pipeline) and store B (written by cuzarr).
    """

    model: npt.NDArray[Any]
    keys: set[str]
    stats: dict[str, int]
    zarr_store: Any
    cuzarr_store: Any
    items: dict[str, dict[str, bytes]] = field(default_factory=dict)


def _fill_of(arr: Any) -> Any:
    fill = arr.metadata.fill_value
    if fill is None:
        return np.zeros((), dtype=arr.dtype)[()]
    return fill


def check_parity(
    make_store: Callable[[str], Any],
    create: Mapping[str, Any],
    steps: Sequence[Step],
    *,
    reads: Sequence[Selection] = (),
    path: str = "arr",
    open_config: Mapping[str, Any] | None = None,
    compare_bytes: bool = True,
    engine: bool = True,
) -> ParityResult:
    """Write the same sequence through both pipelines and check every cross-read.

    zarr's default pipeline creates the array in store A (``make_store("zarr")``) and applies
    ``steps``; cuzarr (``strict=True`` when ``engine``) does the same in store B. Then both
    stores must hold the same keys (and the same bytes, with ``compare_bytes``), and each
    pipeline reading each store must return the NumPy model, for the whole array and for each
    selection in ``reads``.

    Parameters
    ----------
    make_store : callable
        ``make_store(name) -> Store``; called with ``"zarr"`` and ``"cuzarr"``, must return two
        distinct, empty, writable stores.
    create : mapping
        Keyword arguments of ``zarr.create_array`` (``shape``, ``dtype``, ``chunks``, ...).
    steps : sequence of Write, Resize or Append
        The write sequence.
    reads : sequence of Selection, optional
        Extra selections to read back and compare (the whole array is always read).
    path : str, default "arr"
        Array path inside the stores.
    open_config : mapping, optional
        ``config=`` for opening the array to read (e.g. ``{"read_missing_chunks": False}``).
    compare_bytes : bool, default True
        Also require byte-identical stored objects (metadata and chunks). cuzarr then writes
        with ``zstd_encoder="numcodecs"`` (its default, python-zstandard, writes valid zstd
        frames that may differ from numcodecs' bytes).
    engine : bool, default True
        Expect cuzarr's engine to serve every write and read (strict, no fallback); with
        ``False``, cuzarr runs non-strict and zarr's pipeline may serve the array.

    Returns
    -------
    ParityResult

    Raises
    ------
    AssertionError
        On any difference.
    """
    import zarr

    from cuzarr.diagnostics import reset_stats, stats

    stores = {"zarr": make_store("zarr"), "cuzarr": make_store("cuzarr")}
    model: npt.NDArray[Any] | None = None
    chunks: tuple[int, ...] = ()
    reset_stats()
    for name in ("zarr", "cuzarr"):
        # Byte-identical zstd chunks need numcodecs as cuzarr's zstd encoder.
        extra = {"zstd_encoder": "numcodecs"} if compare_bytes and name == "cuzarr" else {}
        with use_pipeline(name, strict=engine, **extra):
            arr = zarr.create_array(stores[name], name=path, **create)
            if model is None:
                chunks = tuple(arr.shards or arr.chunks)  # what arr.blocks steps by
                fill = _fill_of(arr)
                model = np.full(arr.shape, fill, dtype=arr.dtype)
                for step in steps:
                    model = step.apply_model(model, fill, chunks)
            for step in steps:
                step.apply(arr)
    assert model is not None
    written = stats()
    if engine:
        _check_engine(written, writes=any(not isinstance(s, Resize) for s in steps), reads=False)

    prefix = f"{path}/" if path else ""
    keys_a, keys_b = stored_keys(stores["zarr"], prefix), stored_keys(stores["cuzarr"], prefix)
    if keys_a != keys_b:
        raise AssertionError(
            f"stored keys differ: only zarr wrote {sorted(keys_a - keys_b)}, "
            f"only cuzarr wrote {sorted(keys_b - keys_a)}"
        )
    items: dict[str, dict[str, bytes]] = {}
    if compare_bytes:
        items = {name: stored_items(s, prefix) for name, s in stores.items()}
        differ = sorted(k for k in keys_a if items["zarr"].get(k) != items["cuzarr"].get(k))
        if differ:
            raise AssertionError(f"stored bytes differ for keys {differ}")

    reset_stats()
    for reader in ("zarr", "cuzarr"):
        for writer, store in stores.items():
            with use_pipeline(reader, strict=engine):
                arr = zarr.open_array(
                    store,
                    path=path,
                    mode=_read_mode(store),
                    config=cast("ArrayConfigParams", dict(open_config or {})),
                )
                label = f"{reader} reading what {writer} wrote"
                # zarr v3 metadata has no byte order: a reopened array reads in native order
                # whatever dtype created it, so the model takes the reopened array's dtype.
                expected_all = model.astype(arr.dtype, copy=False)
                assert_same_array(arr[...], expected_all, msg=f"{label}, [...]")
                for sel in reads:
                    expected = model_get(expected_all, sel, chunks)
                    assert_same_array(read(arr, sel), expected, msg=f"{label}, {sel!r}")
    read_stats = stats()
    if engine:
        _check_engine(read_stats, writes=False, reads=model.size > 0)
    total = {k: written.get(k, 0) + read_stats.get(k, 0) for k in {*written, *read_stats}}
    return ParityResult(
        model=model,
        keys=keys_a,
        stats=total,
        zarr_store=stores["zarr"],
        cuzarr_store=stores["cuzarr"],
        items=items,
    )


def _read_mode(store: Any) -> str:
    """``"r"``, or ``"r+"`` for stores that cannot make a read-only copy (``ZipStore``)."""
    from zarr.abc.store import Store

    can = type(store).with_read_only is not Store.with_read_only
    return "r" if store.read_only or can else "r+"


def _check_engine(counts: Mapping[str, int], *, writes: bool, reads: bool) -> None:
    fallbacks = {k: v for k, v in counts.items() if k.startswith("fallback") and v}
    if fallbacks:
        raise AssertionError(f"cuzarr fell back to zarr's pipeline: {fallbacks}")
    if writes and not counts.get("engine_writes"):
        raise AssertionError(f"cuzarr's engine served no write: {dict(counts)}")
    if reads and not counts.get("engine_reads"):
        raise AssertionError(f"cuzarr's engine served no read: {dict(counts)}")
