"""cuzarr: a fast engine for Zarr arrays, and a drop-in codec pipeline for zarr-python.

>>> import cuzarr, zarr
>>> cuzarr.configure()  # zarr reads and writes now run on cuzarr's engine  # doctest: +SKIP

``import cuzarr`` imports no GPU package; the GPU backend loads on first use.
"""

from __future__ import annotations

from cuzarr.api import create, open
from cuzarr.array import Array
from cuzarr.backends.probe import gpu_info
from cuzarr.config import Device, Settings, configure, get_settings
from cuzarr.diagnostics import reset_stats, stats
from cuzarr.errors import (
    CorruptChunkError,
    CuzarrError,
    MetadataError,
    NodeNotFoundError,
    StoreError,
    UnsupportedError,
)
from cuzarr.group import Group
from cuzarr.zarr_pipeline import Pipeline

__version__ = "0.1.0"

__all__ = [
    "Array",
    "CorruptChunkError",
    "CuzarrError",
    "Device",
    "Group",
    "MetadataError",
    "NodeNotFoundError",
    "Pipeline",
    "Settings",
    "StoreError",
    "UnsupportedError",
    "configure",
    "create",
    "get_settings",
    "gpu_info",
    "open",
    "reset_stats",
    "stats",
]


def _register() -> None:
    """Register ``cuzarr.Pipeline`` under its public path (zarr keys pipelines by path)."""
    from zarr.registry import _pipeline_registry, register_pipeline

    register_pipeline(Pipeline)
    # zarr keys the registry by ``module.qualname``; users write ``cuzarr.Pipeline``.
    _pipeline_registry["cuzarr.Pipeline"] = Pipeline
    # GPU-only nvCOMP formats (cuzarr.ans, ...): reading them without a GPU raises a clear
    # UnsupportedError. Registration imports no GPU package.
    from cuzarr.codecs.gpu_only import register as register_gpu_codecs

    register_gpu_codecs()


_register()
