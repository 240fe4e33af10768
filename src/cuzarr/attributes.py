"""User attributes of arrays and groups, persisted in their metadata documents."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from cuzarr.stores.base import ChunkStore

__all__ = ["Attributes", "persist_attributes"]


class Attributes(MutableMapping[str, Any]):
    """User attributes of an array or group; every change is persisted at once.

    The metadata document (``zarr.json``, or ``.zattrs`` for Zarr v2) is rewritten whole and
    atomically (the store replaces the object in one step). ``update`` persists once.
    """

    def __init__(self, initial: dict[str, Any], persist: Callable[[dict[str, Any]], None]) -> None:
        self._data = dict(initial)
        self._persist = persist
        self._lock = threading.Lock()

    def _commit(self, change: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            new = dict(self._data)
            change(new)
            self._persist(new)
            self._data = new

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._commit(lambda d: d.__setitem__(key, value))

    def __delitem__(self, key: str) -> None:
        if key not in self._data:
            raise KeyError(key)
        self._commit(lambda d: d.__delitem__(key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Attributes({self._data!r})"

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Update several attributes, persisted in one write."""
        items = dict(*args, **kwargs)
        self._commit(lambda d: d.update(items))

    def put(self, attributes: dict[str, Any]) -> None:
        """Replace all attributes with ``attributes``."""

        def change(d: dict[str, Any]) -> None:
            d.clear()
            d.update(attributes)

        self._commit(change)

    def asdict(self) -> dict[str, Any]:
        """A copy of the attributes as a plain dict."""
        return dict(self._data)


def persist_attributes(
    store: ChunkStore, path: str, zarr_format: int, attributes: dict[str, Any]
) -> None:
    """Rewrite a node's attributes: ``zarr.json``'s ``attributes`` (v3) or ``.zattrs`` (v2)."""
    prefix = f"{path}/" if path else ""
    if zarr_format == 2:
        key = f"{prefix}.zattrs"
        doc: dict[str, Any] = attributes
    else:
        key = f"{prefix}zarr.json"
        got = store.get(key)
        if got is None:
            raise FileNotFoundError(f"zarr.json of '{path}' disappeared from {store.name}")
        doc = json.loads(bytes(memoryview(got.data)))
        doc["attributes"] = attributes
    text = json.dumps(doc, indent=2)
    store.put(key, np.frombuffer(text.encode("utf-8"), np.uint8))
