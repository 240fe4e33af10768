"""A fault-injecting zarr store wrapper, for testing what survives failed reads and writes.

:class:`FaultyStore` wraps any zarr-python ``Store`` and, by rule, makes the Nth ``get``,
``set`` or ``delete`` of a matching key fail, return a short read, or write only a prefix of
the value before failing (a store that tears writes). It counts every call and every fault, so
tests can report how many faults they injected. Because it is not exactly ``LocalStore`` or
``MemoryStore``, cuzarr's engine reaches it through
:class:`~cuzarr.stores.zarr_store.ZarrChunkStore`, the path every remote store takes.

Examples
--------
>>> import zarr
>>> from zarr.storage import MemoryStore
>>> from cuzarr.testing.faults import Fault, FaultyStore
>>> store = FaultyStore(MemoryStore(), [Fault(op="set", nth=2)])
>>> store.faults_injected
0
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.storage import WrapperStore

__all__ = ["METADATA_KEYS", "Fault", "FaultError", "FaultyStore"]

#: Key patterns of metadata documents; faults target chunks unless told otherwise.
METADATA_KEYS = ("*zarr.json", "*.zarray", "*.zattrs", "*.zgroup", "*.zmetadata")

Op = Literal["get", "set", "delete"]
Kind = Literal["error", "short_read", "partial_write"]


class FaultError(OSError):
    """The error a :class:`FaultyStore` raises.

    Its message does not name the key on purpose: the caller must.
    """


@dataclass(slots=True, kw_only=True)
class Fault:
    """One injection rule.

    Parameters
    ----------
    op : {"get", "set", "delete"}
        The operation to hit.
    nth : int
        Fire on the ``nth`` matching call (1-based), and on every ``every``-th one after.
    kind : {"error", "short_read", "partial_write"}
        ``error`` raises :class:`FaultError` without touching the store; ``short_read`` returns
        the first ``fraction`` of the value (``get`` only); ``partial_write`` writes the first
        ``fraction`` of the value to the wrapped store, then raises (``set`` only).
    fraction : float
        Share of the bytes kept by short reads and partial writes.
    every : int or None
        Repeat period after the first hit; ``None`` fires once.
    keys : str
        ``fnmatch`` pattern of keys this rule applies to (metadata keys are never hit unless
        ``include_metadata``).
    include_metadata : bool
        Also hit metadata documents.
    """

    op: Op
    nth: int = 1
    kind: Kind = "error"
    fraction: float = 0.5
    every: int | None = None
    keys: str = "*"
    include_metadata: bool = False
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.nth < 1:
            raise ValueError(f"nth: expected an integer >= 1, got {self.nth!r}")
        if self.kind == "short_read" and self.op != "get":
            raise ValueError("short_read faults apply to op='get'")
        if self.kind == "partial_write" and self.op != "set":
            raise ValueError("partial_write faults apply to op='set'")
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError(f"fraction: expected 0 <= fraction < 1, got {self.fraction!r}")

    def matches(self, op: str, key: str) -> bool:
        """Whether this rule applies to ``op`` on ``key``."""
        if op != self.op or not fnmatch.fnmatchcase(key, self.keys):
            return False
        return self.include_metadata or not any(
            fnmatch.fnmatchcase(key, p) for p in METADATA_KEYS
        )

    def tick(self) -> bool:
        """Count a matching call; return whether it must fail."""
        self.seen += 1
        k = self.seen - self.nth
        hit = k == 0 or (k > 0 and self.every is not None and k % self.every == 0)
        if hit:
            self.fired += 1
        return hit


class FaultyStore(WrapperStore[Any]):
    """A zarr store that fails on purpose.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The wrapped store.
    faults : list of Fault
        Injection rules, checked in order (the first that fires wins).

    Attributes
    ----------
    calls : dict
        Calls per operation (``get``, ``set``, ``delete``) on all keys.
    faults_injected : int
        Faults fired so far.
    log : list of tuple
        ``(op, key, kind)`` of every fault fired.
    """

    def __init__(self, store: Any, faults: list[Fault] | None = None) -> None:
        super().__init__(store)
        self.faults = list(faults or [])
        self.calls = {"get": 0, "set": 0, "delete": 0}
        self.log: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    @property
    def faults_injected(self) -> int:
        """Faults fired so far (by this store and the copies zarr derived from it)."""
        return len(self.log)

    def _with_store(self, store: Any) -> FaultyStore:
        # zarr derives stores (``with_read_only``); the copy shares rules, counters and log.
        other = type(self)(store, self.faults)
        other.calls, other.log, other._lock = self.calls, self.log, self._lock
        return other

    def __str__(self) -> str:
        return f"faulty-{self._store}"

    def _check(self, op: Op, key: str) -> Fault | None:
        with self._lock:
            self.calls[op] += 1
            for fault in self.faults:
                if fault.matches(op, key) and fault.tick():
                    self.log.append((op, key, fault.kind))
                    return fault
        return None

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        """Get, failing or returning a short value by rule."""
        fault = self._check("get", key)
        if fault is not None and fault.kind == "error":
            raise FaultError("injected read failure")
        value = await self._store.get(key, prototype, byte_range)
        if fault is not None and value is not None:
            n = len(value)
            return value[: int(n * fault.fraction)]
        return value

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        """Ranged gets count as gets of their keys."""
        pairs = list(key_ranges)
        out = []
        for key, byte_range in pairs:
            out.append(await self.get(key, prototype, byte_range))
        return out

    async def get_ranges(self, key: str, byte_ranges: Any, **kwargs: Any) -> Any:
        """Ranged reads go through this store's ``get`` (zarr's coalescer over it).

        ``WrapperStore`` forwards ``get_ranges`` to the wrapped store, which would bypass the
        faults; zarr's base implementation merges the ranges and calls ``self.get``.
        """
        async for group in Store.get_ranges(self, key, byte_ranges, **kwargs):
            yield group

    async def set(self, key: str, value: Any) -> None:
        """Set, failing before writing or after writing a prefix, by rule."""
        fault = self._check("set", key)
        if fault is not None:
            if fault.kind == "partial_write":
                await self._store.set(key, value[: int(len(value) * fault.fraction)])
            raise FaultError("injected write failure")
        await self._store.set(key, value)

    async def delete(self, key: str) -> None:
        """Delete, failing by rule."""
        if self._check("delete", key) is not None:
            raise FaultError("injected delete failure")
        await self._store.delete(key)
