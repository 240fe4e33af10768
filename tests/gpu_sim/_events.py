"""What the simulated device did, in order: the record tests assert on."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "count", "events", "record", "reset"]


@dataclass(frozen=True)
class Event:
    """One device-side event.

    Attributes
    ----------
    kind : str
        ``h2d`` / ``d2h`` (copies; ``pinned`` in ``info`` for pinned host memory), ``launch``
        (a kernel), ``decode`` / ``encode`` (one nvCOMP call), ``sync`` (the host waited for
        the device: ``reason`` in ``info``), ``cufile`` (a kvikio read).
    name : str
        Kernel or algorithm name, or what synchronized.
    info : dict
        Details (bytes, batch size, grid and block, ...).
    """

    kind: str
    name: str = ""
    info: dict[str, Any] = field(default_factory=dict)


events: list[Event] = []
_lock = threading.Lock()


def record(kind: str, name: str = "", **info: Any) -> None:
    """Append an event (thread-safe)."""
    with _lock:
        events.append(Event(kind, name, info))


def count(kind: str, name: str | None = None) -> int:
    """Events of ``kind`` (and ``name``) so far."""
    return sum(1 for e in events if e.kind == kind and (name is None or e.name == name))


def reset() -> None:
    """Forget every event."""
    with _lock:
        events.clear()
