"""Selections of the explicit API turned into engine chunk requests.

:class:`GridIndexer` is built once per array at open time and turns a basic selection (integers,
negative integers, slices with any non-zero step, ``Ellipsis`` and ``None``) into a list of
:class:`~cuzarr.engine.requests.ChunkRequest` with the same chunk and output selections
zarr-python's ``BasicIndexer`` produces, without zarr's per-call objects. Orthogonal,
coordinate, mask and block selections go through zarr's own indexers (see
:mod:`cuzarr._zarr_compat`), converted by :meth:`GridIndexer.requests_from_zarr`.

The unit of the grid is the stored object: the chunk, or the shard of a sharded array (the
engine reads inner chunks of shards itself).

Negative slice steps follow NumPy: the positive-step range covering the same elements is read
(or written) and the output axis is reversed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuzarr.engine.requests import ChunkRequest, new_request
from cuzarr.metadata.spec import ArraySpec

__all__ = ["BasicPlan", "GridIndexer"]

#: One dimension's projection: (chunk index, selection in chunk, selection in output, complete).
DimProjection = tuple[int, Any, slice | None, bool]

_REVERSE = slice(None, None, -1)
_ALL = slice(None)


@dataclass(frozen=True, slots=True)
class BasicPlan:
    """The chunk requests of one basic selection.

    Attributes
    ----------
    requests : list of ChunkRequest
        One per stored chunk (or shard) the selection touches.
    shape : tuple of int
        Shape of the selected region, integer axes dropped (no new axes).
    flip : tuple of slice or None
        Per axis of ``shape``, ``slice(None, None, -1)`` where a negative step reverses the
        axis and ``slice(None)`` elsewhere; ``None`` when no axis is reversed.
    newaxes : tuple of int
        Positions of ``None`` (new) axes in the final result.
    scalar : bool
        Whether the result is a NumPy scalar rather than a 0-d array. As ``zarr.Array``'s
        ``__getitem__``: a scalar for a 0-d array or when the selection has an ellipsis and
        integers for every axis; an integer for every axis without an ellipsis gives a 0-d
        array (zarr reads those as orthogonal selections).
    """

    requests: list[ChunkRequest]
    shape: tuple[int, ...]
    flip: tuple[slice, ...] | None
    newaxes: tuple[int, ...]
    scalar: bool

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The shape of the result, new axes included."""
        if not self.newaxes:
            return self.shape
        shape = list(self.shape)
        for axis in self.newaxes:
            shape.insert(axis, 1)
        return tuple(shape)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class GridIndexer:
    """Chunk requests over the regular grid of one array.

    Parameters
    ----------
    spec : ArraySpec
        The array's metadata; ``spec.chunk_shape`` is the unit of the grid (chunk or shard).
    """

    __slots__ = ("_key_prefix", "_sep", "_zero_key", "chunks", "ndim", "shape")

    def __init__(self, spec: ArraySpec) -> None:
        self.shape = spec.shape
        self.chunks = spec.chunk_shape
        self.ndim = len(spec.shape)
        enc = spec.chunk_key_encoding
        base = f"{spec.path}/" if spec.path else ""
        self._sep: str = enc.separator
        if enc.kind == "default":
            self._key_prefix = f"{base}c{enc.separator}"
            self._zero_key = f"{base}c"
        else:
            self._key_prefix = base
            self._zero_key = f"{base}0"

    # ------------------------------------------------------------------ keys

    def key(self, coords: Sequence[int]) -> str:
        """Store key of the chunk at grid position ``coords`` (as ``ArraySpec.chunk_key``)."""
        if not coords:
            return self._zero_key
        return self._key_prefix + self._sep.join(map(str, coords))

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        return tuple(-(-s // c) if c else 0 for s, c in zip(self.shape, self.chunks, strict=True))

    # ------------------------------------------------------------------ basic selections

    def parse_basic(self, selection: Any) -> tuple[list[Any], tuple[int, ...], bool] | None:
        """Normalise a basic selection to one entry per axis, plus new-axis positions.

        Also returns whether the selection had an ellipsis. Returns ``None`` when
        ``selection`` is not basic (arrays, lists, masks): the caller dispatches it as zarr
        does. Raises ``IndexError`` for too many indices or two
        ellipses.
        """
        items = selection if isinstance(selection, tuple) else (selection,)
        entries: list[Any] = []
        newaxes: list[int] = []
        ellipsis_at = -1
        ellipsis_out = 0
        out_axis = 0
        for item in items:
            if isinstance(item, slice) or _is_int(item):
                entries.append(item)
                if isinstance(item, slice):
                    out_axis += 1
            elif item is Ellipsis:
                if ellipsis_at >= 0:
                    raise IndexError("an index can only have a single ellipsis ('...')")
                ellipsis_at = len(entries)
                ellipsis_out = out_axis
                entries.append(item)
            elif item is None:
                newaxes.append(out_axis)
                out_axis += 1
            else:
                return None
        n_real = len(entries) - (1 if ellipsis_at >= 0 else 0)
        if n_real > self.ndim:
            raise IndexError(
                f"too many indices for array: array is {self.ndim}-dimensional, but "
                f"{n_real} were indexed"
            )
        fill = [_ALL] * (self.ndim - n_real)
        if ellipsis_at >= 0:
            entries[ellipsis_at : ellipsis_at + 1] = fill
            # New axes after the ellipsis sit after the axes it expanded to.
            newaxes = [a + len(fill) if a >= ellipsis_out else a for a in newaxes]
        else:
            entries.extend(fill)
        return entries, tuple(newaxes), ellipsis_at >= 0

    def basic(self, selection: Any) -> BasicPlan | None:
        """Plan a basic selection, or return ``None`` if it is not basic.

        Raises
        ------
        IndexError
            For out-of-bounds integers, zero steps, too many indices or two ellipses.
        """
        if (
            type(selection) is tuple
            and len(selection) == self.ndim
            and self.ndim
            and all([type(s) is slice for s in selection])
        ):
            plan = self._windows(selection)
            if plan is not None:
                return plan
        parsed = self.parse_basic(selection)
        if parsed is None:
            return None
        entries, newaxes, has_ellipsis = parsed
        shape_out: list[int] = []
        flip: list[slice] = []
        flipped = False
        per_dim: list[list[DimProjection]] = []
        empty = False
        for dim, (entry, n, c) in enumerate(zip(entries, self.shape, self.chunks, strict=True)):
            if isinstance(entry, slice):
                start, stop, step = entry.indices(n)
                if step < 0:
                    # The same elements in ascending order; the output axis is reversed.
                    count = len(range(start, stop, step))
                    if count:
                        low = start + (count - 1) * step
                        start, stop = low, start + 1
                    else:
                        start = stop = 0
                    step = -step
                    flip.append(_REVERSE)
                    flipped = True
                else:
                    flip.append(_ALL)
                projections = _slice_projections(start, stop, step, n, c)
                nitems = max(0, -(-(stop - start) // step))
                shape_out.append(nitems)
                if not nitems:
                    empty = True
                per_dim.append(projections)
            else:
                i = int(entry)
                if i < 0:
                    i += n
                if i < 0 or i >= n:
                    raise IndexError(
                        f"index {int(entry)} is out of bounds for axis {dim} with size {n}"
                    )
                ix = i // c
                off = ix * c
                per_dim.append([(ix, i - off, None, min(c, n - off) == 1)])
        scalar = not shape_out
        requests: list[ChunkRequest] = []
        if not empty:
            requests = self._requests(per_dim)
        return BasicPlan(
            requests=requests,
            shape=tuple(shape_out),
            flip=tuple(flip) if flipped else None,
            newaxes=newaxes,
            scalar=scalar and not newaxes and (has_ellipsis or not self.ndim),
        )

    def _windows(self, selection: tuple[slice, ...]) -> BasicPlan | None:
        """Plan one slice of step 1 per axis (windows, chunk regions: the common case) quickly.

        The same plan as the general path without its per-axis dispatch; an axis within one
        chunk (every axis of a chunk-by-chunk read) is projected in place. ``None`` (the
        general path) for other steps and empty slices.
        """
        per_dim: list[list[DimProjection]] = []
        shape_out: list[int] = []
        for s, n, c in zip(selection, self.shape, self.chunks, strict=True):
            if s.step is not None and s.step != 1:
                return None
            start, stop, _ = s.indices(n)
            if stop <= start:
                return None
            shape_out.append(stop - start)
            first = start // c
            if first == (stop - 1) // c:
                # Inside one chunk: _slice_projections' one projection, made in place.
                off = first * c
                complete = start == off and stop >= min(off + c, n)
                per_dim.append(
                    [(first, slice(start - off, stop - off, 1), slice(0, stop - start), complete)]
                )
            else:
                per_dim.append(_slice_projections(start, stop, 1, n, c))
        return BasicPlan(
            requests=self._requests(per_dim),
            shape=tuple(shape_out),
            flip=None,
            newaxes=(),
            scalar=False,
        )

    def region(self, region: Sequence[tuple[int, int]]) -> list[ChunkRequest]:
        """Requests for the box ``[(start, stop), ...]`` (in bounds, step 1, every axis kept)."""
        per_dim = [
            _slice_projections(s, e, 1, n, c)
            for (s, e), n, c in zip(region, self.shape, self.chunks, strict=True)
        ]
        return self._requests(per_dim)

    def _requests(self, per_dim: list[list[DimProjection]]) -> list[ChunkRequest]:
        if all(len(p) == 1 for p in per_dim):
            # One chunk: no product, one request.
            only = [p[0] for p in per_dim]
            return [
                new_request(
                    self.key([p[0] for p in only]),
                    tuple([p[1] for p in only]),
                    tuple([p[2] for p in only if p[2] is not None]),
                    all([p[3] for p in only]),
                )
            ]
        if any(not dim for dim in per_dim):
            return []
        # Many chunks: the product is folded from the last axis. Each combination of the later
        # axes is made once as (key suffix, chunk selection, out selection, complete); a
        # request is then one concatenation of an axis-0 head with a suffix, not a join and
        # three tuples over every axis.
        sep = self._sep
        tail: list[tuple[str, tuple[Any, ...], tuple[Any, ...], bool]] = [("", (), (), True)]
        for dim in reversed(per_dim[1:]):
            tail = [
                (sep + str(ix) + k, (cs, *c), o if os is None else (os, *o), done and d)
                for ix, cs, os, done in dim
                for k, c, o, d in tail
            ]
        heads = [
            (self._key_prefix + str(ix), (cs,), () if os is None else (os,), done)
            for ix, cs, os, done in per_dim[0]
        ]
        make = new_request
        return [
            make(h + k, hc + c, ho + o, hd and d) for h, hc, ho, hd in heads for k, c, o, d in tail
        ]

    # ------------------------------------------------------------------ zarr's indexers

    def requests_from_zarr(self, projections: Iterable[Any]) -> list[ChunkRequest]:
        """Requests from the ``ChunkProjection`` items of one of zarr's indexers."""
        key = self.key
        return [
            ChunkRequest(
                key=key(coords),
                chunk_selection=tuple(chunk_sel) if isinstance(chunk_sel, tuple) else chunk_sel,
                out_selection=out_sel,
                complete=bool(complete),
            )
            for coords, chunk_sel, out_sel, complete in projections
        ]


def _slice_projections(start: int, stop: int, step: int, n: int, c: int) -> list[DimProjection]:
    """zarr's ``SliceDimIndexer`` for a normalised positive-step slice, as a list."""
    if start >= stop:
        return []
    out: list[DimProjection] = []
    first = start // c
    last = (stop - 1) // c
    for ix in range(first, last + 1):
        off = ix * c
        limit = min(off + c, n)
        if start < off:
            remainder = (off - start) % step
            sel_start = step - remainder if remainder else 0
            out_start = -(-(off - start) // step)
        else:
            sel_start = start - off
            out_start = 0
        sel_stop = limit - off if stop > limit else stop - off
        nitems = -(-(sel_stop - sel_start) // step)
        if nitems <= 0:
            continue
        out.append(
            (
                ix,
                slice(sel_start, sel_stop, step),
                slice(out_start, out_start + nitems),
                sel_start == 0 and stop >= limit and step == 1,
            )
        )
    return out
