"""Counters of what the engine did, and the once-per-reason fallback log."""

from __future__ import annotations

import logging
import threading
from collections import Counter

__all__ = ["count", "log_fallback", "log_once", "reset_stats", "stats"]

logger = logging.getLogger("cuzarr")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_logged: set[str] = set()


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to a counter."""
    with _lock:
        _counts[name] += n


def stats() -> dict[str, int]:
    """Return a snapshot of the counters.

    Keys: ``engine_reads`` / ``engine_writes`` (batches the engine served), ``fallback_arrays``
    (arrays opened on zarr's pipeline), ``fallback_reads`` / ``fallback_writes``;
    ``recycled_buffers`` / ``new_large_buffers`` (outputs and buffers of 4 MiB or more in
    memory of earlier ones that were gone, or in new memory: :mod:`cuzarr.backends.recycle`).
    """
    with _lock:
        return dict(_counts)


def reset_stats() -> None:
    """Zero every counter (for tests and benchmarks)."""
    with _lock:
        _counts.clear()


def log_fallback(reason: str) -> None:
    """Log a fallback to zarr's pipeline, once per distinct reason."""
    log_once(f"cuzarr falls back to zarr-python's pipeline: {reason}")


def log_once(message: str, level: int = logging.WARNING) -> None:
    """Log a message once per distinct message (per process), a warning unless ``level`` says."""
    with _lock:
        if message in _logged:
            return
        _logged.add(message)
    logger.log(level, "%s", message)
