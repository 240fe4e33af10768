"""Fixtures of the parity suite: pairs of empty stores of one kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zarr

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
