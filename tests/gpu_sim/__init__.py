"""A strict device simulator: stand-ins for ``cupy``, ``nvidia.nvcomp`` (and its C library,
``nvidia.libnvcomp``) and ``kvikio``, for tests.

``kvikio.zarr.GDSStore`` (kvikio's zarr ``LocalStore`` over kvikio file I/O) is included.

:func:`install` puts the stand-ins into ``sys.modules`` (and tells cuzarr's GPU probe that a
driver is there), so the GPU backend and the whole ``tests/gpu`` suite run on a machine
without a GPU: ``python -m pytest tests/gpu --gpu-sim`` (``make gpu-sim``). They follow the
documented APIs of CuPy 14, nvCOMP 6.0 and kvikio 26.10 and are as strict as the real ones
where the real ones are strict:

- device arrays are their own type; ``numpy.asarray(device_array)`` (or any implicit
  conversion: ``memoryview``, ``bytes``, NumPy operands) raises ``TypeError`` as in CuPy;
  host-to-device conversions are accepted where CuPy accepts them (``cupy.asarray``,
  ``__setitem__``, ``ndarray.set``);
- kernels from ``RawModule(code=...).get_function(name)`` exist only if the source declares
  them, check the grid, the block and every argument's type and dtype against the kernel's C
  signature, and run a NumPy reference of the C code (``_kernels``);
- ``nvcomp.Codec`` takes only the documented keyword arguments; ``decode``/``encode`` take an
  ``Array`` or a ``BatchArray`` (a list is refused with ``TypeError``, as pybind11 does),
  honour ``out=`` capacities and check input alignment;
- every device-side event is recorded in :data:`events` (uploads, downloads, kernel
  launches, nvCOMP calls, stream synchronizations), so tests can assert how a wave ran.

What the simulator cannot know (facts only a GPU run settles, ``bench/gpu_check/probe_api.py``)
is chosen permissively and listed in ``_nvcomp``'s docstring.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import _cupy, _kvikio, _libnvcomp, _nvcomp
from ._events import Event, events, reset

__all__ = ["Event", "data_transfers", "events", "install", "installed", "reset", "uninstall"]

_saved: dict[str, Any] = {}
_NAMES = (
    "cupy",
    "cupy.cuda",
    "cupy.cuda.runtime",
    "nvidia",
    "nvidia.nvcomp",
    "nvidia.libnvcomp",
    "kvikio",
    "kvikio.defaults",
    "kvikio.zarr",
)


def data_transfers(kind: str) -> list[Event]:
    """The ``kind`` transfers (``"h2d"`` or ``"d2h"``) other than the per-call bookkeeping.

    Each batched C decode call (a ``decode`` event with ``api="c"``, of ``n`` streams) uploads
    its pointer table (32 bytes a stream) and downloads the streams' statuses and decoded sizes
    (16 bytes a stream); each ``cuzarr_zstd_walk`` launch over ``n`` frames uploads its table
    (24 bytes a frame) and downloads its verdicts (8 bytes a frame); all pageable. Exactly one
    of each must be recorded per call or launch (``AssertionError`` otherwise). The other
    transfers are returned, in order.
    """
    per_item = {
        "decode": {"h2d": 32, "d2h": 16},
        "cuzarr_zstd_walk": {"h2d": 24, "d2h": 8},
    }
    rest = [e for e in events if e.kind == kind]
    for e in events:
        if e.kind == "decode" and e.info.get("api") == "c":
            what, n = "decode", e.info["n"]
        elif e.kind == "launch" and e.name == "cuzarr_zstd_walk":
            what, n = e.name, e.info["scalars"][-1]
        else:
            continue
        size = per_item[what][kind] * n
        match = [t for t in rest if not t.info["pinned"] and t.info["nbytes"] == size]
        assert match, f"no {kind} of {size} bytes for the {what} of {e.name} {e.info}"
        rest.remove(match[0])
    return rest


def installed() -> bool:
    """Whether the stand-ins are in ``sys.modules``."""
    return sys.modules.get("cupy") is _cupy.module


def install() -> None:
    """Put the stand-ins into ``sys.modules`` and make cuzarr's probe see a driver."""
    if installed():
        return
    for name in _NAMES:
        _saved[name] = sys.modules.get(name)
    sys.modules["cupy"] = _cupy.module
    sys.modules["cupy.cuda"] = _cupy.cuda
    sys.modules["cupy.cuda.runtime"] = _cupy.runtime
    nvidia = sys.modules.get("nvidia")
    if nvidia is None:
        nvidia = types.ModuleType("nvidia")
        nvidia.__path__ = []
        sys.modules["nvidia"] = nvidia
    nvidia.nvcomp = _nvcomp.module  # type: ignore[attr-defined]
    sys.modules["nvidia.nvcomp"] = _nvcomp.module
    nvidia.libnvcomp = _libnvcomp.module  # type: ignore[attr-defined]
    sys.modules["nvidia.libnvcomp"] = _libnvcomp.module
    sys.modules["kvikio"] = _kvikio.module
    sys.modules["kvikio.defaults"] = _kvikio.defaults
    from . import _kvikio_zarr  # imports zarr: only when installed

    sys.modules["kvikio.zarr"] = _kvikio.module.zarr = _kvikio_zarr.module

    # zarr binds ``cp`` when its GPU buffer module is first imported (None without CuPy).
    zarr_gpu = sys.modules.get("zarr.core.buffer.gpu")
    if zarr_gpu is not None:
        _saved["zarr_gpu.cp"] = zarr_gpu.cp
        zarr_gpu.cp = _cupy.module

    from cuzarr.backends import probe

    _saved["probe._has_driver"] = probe._has_driver
    probe._has_driver = lambda: True
    probe.gpu_status.cache_clear()


def uninstall() -> None:
    """Restore ``sys.modules`` and the probe as they were before :func:`install`."""
    if not installed():
        return
    from cuzarr.backends import probe

    probe._has_driver = _saved.pop("probe._has_driver")
    probe.gpu_status.cache_clear()
    if "zarr_gpu.cp" in _saved:
        sys.modules["zarr.core.buffer.gpu"].cp = _saved.pop("zarr_gpu.cp")
    nvidia = sys.modules.get("nvidia")
    if nvidia is not None and getattr(nvidia, "nvcomp", None) is _nvcomp.module:
        del nvidia.nvcomp
    if nvidia is not None and getattr(nvidia, "libnvcomp", None) is _libnvcomp.module:
        del nvidia.libnvcomp
    for name in _NAMES:
        old = _saved.pop(name, None)
        if old is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = old
    for name in [n for n in sys.modules if n.startswith("cuzarr.gpu.")]:
        del sys.modules[name]
