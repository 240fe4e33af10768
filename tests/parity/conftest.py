"""Fixtures of the parity suite: pairs of empty stores of one kind; poisoned recycled memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zarr

from cuzarr import zarr_buffers
from cuzarr.backends import recycle

from ._layouts import StoreFactory, store_factory


@pytest.fixture(params=["memory", "local"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The two stores cuzarr has fast paths for."""
    return str(request.param)


@pytest.fixture
def make_store(store_kind: str, tmp_path: Path) -> StoreFactory:
    return store_factory(store_kind, tmp_path)


@pytest.fixture(autouse=True)
def _restore_zarr_config() -> Any:
    """Every test leaves zarr's configuration as it found it."""
    before = zarr.config.get("codec_pipeline.path")
    yield
    assert zarr.config.get("codec_pipeline.path") == before


#: The byte recycled memory is filled with before it is lent again in this suite.
POISON = 0xA5


@pytest.fixture(autouse=True)
def _poisoned_recycling(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every output and buffer cuzarr allocates, and zarr's outputs under cuzarr's pipeline
    (``AlignedNDBuffer``), come from a pool of recycled memory (of any size, not only large
    ones), filled with :data:`POISON` before it is lent again: a path that returns or uses an
    element it did not write (relying on new memory reading as zeros) reads poison here
    instead, and its parity check fails."""
    pool = recycle.Pool(64 * 1024 * 1024, poison=POISON)
    monkeypatch.setattr(recycle, "RECYCLE_MIN", 0)
    monkeypatch.setattr(zarr_buffers, "ALIGNED_MIN_BYTES", 0)
    monkeypatch.setattr(recycle, "_POOL", pool)
    yield pool
