"""Where ``cuzarr bench`` runs cuzarr's engine: the ``device`` option's values and conversions.

With ``device="gpu"`` cuzarr's engine reads through zarr's GPU buffers (CuPy results) and
writes CuPy values; these helpers give the benchmark its values on the device, its results on
the host for the check, and reads timed until the device is done. CuPy is imported only for
``"gpu"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.config import get_settings

__all__ = ["DEVICES", "on_device", "on_host", "read_all", "resolve_device"]

#: ``device`` values of ``run_benchmark`` and ``run_target_benchmark``.
DEVICES = ("auto", "cpu", "gpu")


def resolve_device(device: str | None) -> str:
    """``device`` checked, or the settings' (``CUZARR_DEVICE``, else ``"auto"``) where ``None``.

    Raises
    ------
    ValueError
        For a value not in :data:`DEVICES`.
    """
    if device is None:
        return str(get_settings().device)
    if device not in DEVICES:
        raise ValueError(f"device: expected one of {DEVICES} or None, got {device!r}")
    return device


def on_device(data: npt.NDArray[Any], device: str) -> Any:
    """The value a write takes: a CuPy copy of ``data`` for ``"gpu"``, else ``data``.

    zarr's GPU buffers copy a NumPy value to the device on every write (with a warning); a
    CuPy value is written from where it is.
    """
    if device != "gpu":
        return data
    import cupy

    return cupy.asarray(data)


def read_all(arr: Any, device: str) -> Callable[[], Any]:
    """A read of all of the zarr array ``arr`` that returns when the data is there.

    For ``"gpu"`` the device is synchronized after the read, so work still queued on a stream
    is timed too.
    """
    if device != "gpu":
        return lambda: arr[...]
    import cupy

    def read() -> Any:
        got = arr[...]
        cupy.cuda.Device().synchronize()
        return got

    return read


def on_host(result: Any) -> npt.NDArray[Any]:
    """A read's result as a NumPy array (a CuPy result is copied to the host)."""
    if isinstance(result, np.ndarray):
        return result
    import cupy

    return cupy.asnumpy(result)  # type: ignore[no-any-return]
