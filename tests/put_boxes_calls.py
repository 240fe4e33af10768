"""Record the batches a local store hands to the batch helper's ``put_boxes`` (for tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from cuzarr.stores import local


@dataclass
class PutBoxesCalls:
    """Every ``_native.put_boxes`` call seen: ``(boxes, helpers)`` in order."""

    calls: list[tuple[int, int]] = field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        """The number of boxes of each call."""
        return [n for n, _ in self.calls]


def record_put_boxes(monkeypatch: pytest.MonkeyPatch) -> PutBoxesCalls:
    """Spy on ``cuzarr.stores.local._put_boxes`` for the life of ``monkeypatch``."""
    seen = PutBoxesCalls()
    real = local._put_boxes
    assert real is not None, "the batch helper is not built"

    def spy(paths: list[bytes], *args: Any, helpers: int = 0, **kw: Any) -> list[int]:
        seen.calls.append((len(paths), helpers))
        return real(paths, *args, helpers=helpers, **kw)

    monkeypatch.setattr(local, "_put_boxes", spy)
    return seen
