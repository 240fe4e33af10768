"""Probe for a usable GPU without importing GPU packages at ``import cuzarr`` time."""

from __future__ import annotations

import functools
import importlib.util

from cuzarr.errors import UnsupportedError

__all__ = ["gpu_status", "require_gpu"]


@functools.cache
def gpu_status() -> str | None:
    """Return ``None`` when a GPU backend is usable, else a sentence saying what is missing."""
    missing = [
        pkg for pkg, mod in (("CuPy", "cupy"), ("nvCOMP", "nvidia.nvcomp"), ("kvikio", "kvikio"))
        if _find(mod) is None
    ]
    if missing:
        return (
            f"{', '.join(missing)} not installed: install cuzarr[cu12] or cuzarr[cu13] "
            "for your CUDA version"
        )
    try:
        import cupy

        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # any driver or runtime failure means no GPU
        return f"no usable CUDA driver or device ({type(exc).__name__}: {exc})"
    if n < 1:
        return "no CUDA device found"
    return "the GPU backend is not implemented yet in this version of cuzarr"


def _find(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def require_gpu() -> None:
    """Raise :class:`UnsupportedError` naming what is missing when no GPU backend is usable."""
    status = gpu_status()
    if status is not None:
        raise UnsupportedError(f"device='gpu' requested but {status}")
