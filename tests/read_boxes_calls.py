"""Record the batches the CPU backend hands to ``zstd_batch.read_boxes`` (for tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from cuzarr.backends import cpu as cpu_backend


@dataclass
class ReadBoxesCalls:
    """Every ``read_boxes`` call seen: ``(chunks asked, chunks placed, streaming)`` in order."""

    calls: list[tuple[int, int, bool]] = field(default_factory=list)

    @property
    def asked(self) -> list[int]:
        """The chunks each call was asked to place."""
        return [n for n, _, _ in self.calls]

    @property
    def placed(self) -> list[int]:
        """The chunks each call placed."""
        return [n for _, n, _ in self.calls]

    @property
    def streaming(self) -> list[bool]:
        """Whether each call copied with streaming stores."""
        return [s for _, _, s in self.calls]


def record_read_boxes(monkeypatch: pytest.MonkeyPatch) -> ReadBoxesCalls:
    """Spy on ``zstd_batch.read_boxes`` as the CPU backend calls it, for ``monkeypatch``'s life."""
    seen = ReadBoxesCalls()
    real = cpu_backend.zstd_batch.read_boxes

    def spy(paths: Any, *args: Any, streaming: bool = False) -> Any:
        status = real(paths, *args, streaming=streaming)
        seen.calls.append((len(paths), int((status == 1).sum()), streaming))
        return status

    monkeypatch.setattr(cpu_backend.zstd_batch, "read_boxes", spy)
    return seen
