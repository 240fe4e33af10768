"""Probe for a usable GPU without importing GPU packages at ``import cuzarr`` time.

The probe looks for the CUDA driver library and for the packages the GPU backend needs (CuPy,
nvCOMP's Python module, kvikio) without importing them; only when all are there does it import
CuPy and ask the driver how many devices it sees. The answer is cached for the process.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
from typing import Any

from cuzarr.errors import UnsupportedError

__all__ = ["EXTRAS_HINT", "gpu_info", "gpu_status", "missing_components", "require_gpu"]

#: What to install, in every message about a missing GPU component.
EXTRAS_HINT = "install cuzarr[cu12] or cuzarr[cu13] (matching your CUDA driver's major version)"

#: (component, importable module) the GPU backend needs.
_PACKAGES = (("CuPy", "cupy"), ("nvCOMP", "nvidia.nvcomp"), ("kvikio", "kvikio"))
_DRIVER_LIBS = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


def _find(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _has_driver() -> bool:
    for name in _DRIVER_LIBS:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def missing_components() -> list[str]:
    """Names of the missing GPU components: ``CUDA driver``, ``CuPy``, ``nvCOMP``, ``kvikio``."""
    missing = [] if _has_driver() else ["CUDA driver (libcuda.so.1)"]
    missing += [name for name, mod in _PACKAGES if _find(mod) is None]
    return missing


@functools.cache
def gpu_status() -> str | None:
    """Return ``None`` when the GPU backend is usable, else a sentence saying what is missing."""
    missing = missing_components()
    if missing:
        return f"{', '.join(missing)} not found: {EXTRAS_HINT}"
    try:
        import cupy

        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # any driver or runtime failure means no GPU
        return f"no usable CUDA driver or device ({type(exc).__name__}: {exc})"
    if n < 1:
        return "no CUDA device found"
    return None


def gpu_info() -> dict[str, Any]:
    """What the GPU backend would use here: device, CUDA, nvCOMP, and kvikio's I/O mode.

    ``usable`` is false (with ``reason``) where no GPU backend is usable; otherwise ``io``
    says whether kvikio reads use GPUDirect Storage (``gds``) or its compatibility mode
    (POSIX reads through pinned bounce buffers of ``bounce_buffer_bytes``). Imports GPU
    packages only where they are usable.
    """
    status = gpu_status()
    if status is not None:
        return {"usable": False, "reason": status}
    from cuzarr.gpu.files import device_report

    return {"usable": True, "reason": None, **device_report()}


def require_gpu() -> None:
    """Raise :class:`UnsupportedError` naming what is missing when no GPU backend is usable."""
    status = gpu_status()
    if status is not None:
        raise UnsupportedError(f"device='gpu' requested but {status}")
