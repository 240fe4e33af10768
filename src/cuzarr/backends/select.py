"""Which backend an array's engine runs on: the one place ``device`` becomes a backend.

``device="cpu"``: :class:`~cuzarr.backends.cpu.CpuBackend`. ``device="gpu"``:
:class:`cuzarr.gpu.backend.GpuBackend` (CuPy results). ``device="auto"``: NumPy results always;
decoded on the GPU (:class:`cuzarr.gpu.host_backend.GpuHostBackend`) where a GPU is usable and
the array's decoded chunk (the inner chunk of a sharded array: one unit of decoder work) is at
least ``Settings.gpu_crossover_bytes``, else on the CPU. Without a measured crossover (``None``,
the default) ``auto`` is the CPU engine.

The GPU modules are imported only when a GPU backend is chosen (``import cuzarr`` imports no
GPU package).
"""

from __future__ import annotations

import logging

from cuzarr.backends.base import Backend, Codec
from cuzarr.backends.cpu import CpuBackend
from cuzarr.backends.probe import gpu_status, require_gpu
from cuzarr.config import Device, Settings
from cuzarr.diagnostics import log_once

__all__ = ["auto_on_gpu", "backend_for", "backend_named", "decode_unit_nbytes"]


def decode_unit_nbytes(codec: Codec) -> int:
    """Decoded bytes of one unit the decoder works on: a chunk, or a sharded array's inner chunk."""
    sharding = codec.sharding
    return sharding.inner.nbytes if sharding is not None else codec.nbytes


def auto_on_gpu(settings: Settings, codec: Codec) -> tuple[bool, str]:
    """Whether ``device="auto"`` decodes ``codec``'s chunks on the GPU, and why (a sentence)."""
    crossover = settings.gpu_crossover_bytes
    if crossover is None:
        return False, "no gpu_crossover_bytes measured on this machine"
    nbytes = decode_unit_nbytes(codec)
    if nbytes < crossover:
        return False, f"decoded chunks of {nbytes} bytes < gpu_crossover_bytes={crossover}"
    from cuzarr.gpu.plan import classify_chain  # host-side planning: no GPU package

    sharding = codec.sharding
    chain = classify_chain(sharding.inner if sharding is not None else codec)
    if not chain.gpu_decode:
        return False, f"its chunks have no GPU decoder ({chain.cpu_reason})"
    status = gpu_status()
    if status is not None:
        return False, f"no usable GPU ({status})"
    return True, f"decoded chunks of {nbytes} bytes >= gpu_crossover_bytes={crossover}"


def backend_for(
    settings: Settings, codec: Codec, *, device: Device | None = None, where: str = ""
) -> Backend:
    """The backend of an engine for ``codec``'s array.

    Parameters
    ----------
    settings : Settings
        The array's settings (``device`` and ``gpu_crossover_bytes``).
    codec : ChunkCodec or V2ChunkCodec
        The array's compiled chain.
    device : Device, optional
        Overrides ``settings.device`` (zarr's pipeline passes ``cpu`` for ``gpu`` with NumPy
        buffers: those go to the CPU engine).
    where : str, default ""
        The array, for the log line saying what ``auto`` chose.

    Raises
    ------
    UnsupportedError
        For ``device="gpu"`` without a usable GPU.
    """
    dev = settings.device if device is None else device
    if dev is Device.GPU:
        require_gpu()
        from cuzarr.gpu.backend import GpuBackend

        return GpuBackend(settings)
    if dev is Device.AUTO:
        on_gpu, why = auto_on_gpu(settings, codec)
        target = f"array '{where}'" if where else f"an array of {codec.shape} chunks"
        place = "the GPU (NumPy results)" if on_gpu else "the CPU"
        log_once(f"device='auto' decodes {target} on {place}: {why}", logging.INFO)
        if on_gpu:
            from cuzarr.gpu.host_backend import GpuHostBackend

            return GpuHostBackend(settings)
    return CpuBackend()


def backend_named(name: str, settings: Settings) -> Backend:
    """The backend a pickled engine ran on (``Backend.name``), rebuilt in this process.

    ``"gpu-host"`` (``auto`` on the GPU, NumPy results) becomes the CPU backend where this
    process has no usable GPU: the results are the same arrays either way.
    """
    if name == "gpu":
        from cuzarr.gpu.backend import GpuBackend

        return GpuBackend(settings)
    if name == "gpu-host":
        status = gpu_status()
        if status is None:
            from cuzarr.gpu.host_backend import GpuHostBackend

            return GpuHostBackend(settings)
        log_once(
            f"device='auto' decodes on the CPU in this process: no usable GPU ({status})",
            logging.INFO,
        )
    return CpuBackend()
