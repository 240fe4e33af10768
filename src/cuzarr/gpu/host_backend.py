"""The GPU backend with results on the host: what ``device="auto"`` runs on past the crossover.

:class:`GpuHostBackend` decodes and encodes on the GPU exactly as
:class:`~cuzarr.gpu.backend.GpuBackend` does (waves, kvikio reads of local files, one nvCOMP
call per algorithm, the same CPU fallbacks), but its arrays are NumPy arrays: a decoded wave is
gathered in one device buffer and brought to the host in one copy into pinned memory (in
windows where it is larger than the thread's pinned stage, :mod:`cuzarr.gpu.pinned`), and
the chunks of a written wave go to the device through the same kind of stage.
``device="auto"`` picks it per array by the measured crossover
(``Settings.gpu_crossover_bytes``, :func:`cuzarr.backends.select.backend_for`), so ``auto``
returns NumPy arrays on every machine.

Imported only when chosen: it imports CuPy and nvCOMP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from cuzarr.backends.base import Codec, DecodeItem, Namer, reraise_decode
from cuzarr.backends.cpu import CpuBackend
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.config import Settings
from cuzarr.diagnostics import count
from cuzarr.gpu import pinned
from cuzarr.gpu.backend import GpuBackend
from cuzarr.stores.base import ChunkStore

__all__ = ["GpuHostBackend"]

class GpuHostBackend(GpuBackend):
    """Decodes and encodes on the GPU; reads return, and writes take, NumPy arrays.

    Parameters
    ----------
    settings : Settings
        As for :class:`~cuzarr.gpu.backend.GpuBackend`: ``gpu_wave_bytes`` sizes the
        waves (and so each device-to-host copy), ``threads`` the CPU decodes of chains
        without a GPU path.
    """

    name = "gpu-host"
    xp = np

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._cpu = CpuBackend()
        self._stage = pinned.PinnedStage("downloads")

    # ------------------------------------------------------------------ memory

    def asarray(self, value: Any) -> Any:
        """The value as a NumPy array (no copy if it is one)."""
        return self._cpu.asarray(value)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised NumPy array."""
        return self._cpu.empty(shape, dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        """A NumPy array of ``value``."""
        return self._cpu.full(shape, value, dtype)

    def copy(self, array: Any, dtype: Any) -> Any:
        """A writable NumPy copy."""
        return self._cpu.copy(array, dtype)

    def all_equal(self, chunk: Any, fill: Any) -> bool:
        """zarr's empty-chunk rule, on the host (as the CPU backend applies it)."""
        return self._cpu.all_equal(chunk, fill)

    # ------------------------------------------------------------------ reads

    def read_direct(self, store: ChunkStore, key: str, codec: Codec, dest: Any) -> int | None:
        """Not here (``-1``): the destination is host memory; the chunk goes through a wave."""
        return -1

    def decode(self, codec: Codec, items: Sequence[DecodeItem], name: Namer) -> list[Any]:
        """Decode a wave on the GPU and bring it to the host in one copy.

        The wave's chunks are decoded into one device buffer (``GpuBackend.decode``, which
        falls back to the CPU as it does for ``device="gpu"``), copied to this thread's pinned
        staging buffer at once, then placed in each item's ``dest`` (NumPy). Items without a
        ``dest`` get a view of the staging buffer, valid until the next decode on this thread
        (the contract of :class:`~cuzarr.backends.base.DecodeItem`). A wave larger than the
        stage (:data:`~cuzarr.gpu.pinned.STAGE_BYTES`) comes back in windows of whole chunks,
        one copy each, and its items without a ``dest`` get copies. Chains without a GPU
        path decode on the CPU straight into their destinations (``gpu_cpu_decodes``).
        """
        if not items:
            return []
        if not self.chain(codec).gpu_decode:
            count("gpu_cpu_decodes", len(items))
            return parallel_map(
                lambda item: self._decode_on_cpu(codec, item, name),
                list(items),
                self.settings.n_threads,
            )
        wave = cupy.empty((len(items), *codec.shape), codec.dtype)
        super().decode(codec, [item._replace(dest=wave[i]) for i, item in enumerate(items)], name)
        # One copy for the wave, or windows of whole chunks where it is larger than the stage;
        # then chunks without a destination are copied out of the stage before the next
        # window overwrites it (with one window they stay views of it).
        windows = range(0, len(items), max(1, pinned.STAGE_BYTES // max(1, codec.nbytes)))
        out: list[Any] = []
        for lo in windows:
            part = wave[lo : lo + windows.step]
            host = self._stage.get(part.nbytes)[: part.nbytes].view(codec.dtype)
            host = host.reshape(part.shape)
            part.get(out=host)
            for item, chunk in zip(items[lo : lo + windows.step], host, strict=True):
                if item.dest is not None:
                    out.append(_place(item.dest, chunk))
                else:
                    out.append(chunk.copy() if len(windows) > 1 else chunk)
        return out

    @staticmethod
    def _decode_on_cpu(codec: Codec, item: DecodeItem, name: Namer) -> Any:
        """One chunk of a chain without a GPU path, decoded on the CPU into its ``dest``."""
        try:
            chunk = codec.decode(item.raw)
        except Exception as exc:
            reraise_decode(name(item.key, item.inner), exc)
            raise  # pragma: no cover - reraise_decode always raises
        return chunk if item.dest is None else _place(item.dest, chunk)

    # ------------------------------------------------------------------ writes

    def encode(self, codec: Codec, chunks: Sequence[Any]) -> list[Buf]:
        """Upload a wave of host chunks through the pinned stage and encode it on the GPU.

        Chains without a GPU encoder are encoded on the CPU where the chunks are
        (``gpu_cpu_encodes``); the others go to ``GpuBackend.encode`` as device arrays.
        """
        if not chunks:
            return []
        if not self.chain(codec).gpu_encode:
            count("gpu_cpu_encodes", len(chunks))
            return self._cpu.encode(codec, chunks)
        flats = [np.ascontiguousarray(c).reshape(-1).view(np.uint8) for c in chunks]
        dev, offsets, sizes = pinned.upload(flats)  # through the pinned stage
        on_device = [
            dev[o : o + n].view(c.dtype).reshape(c.shape)
            for c, o, n in zip(chunks, offsets, sizes, strict=True)
        ]
        return super().encode(codec, on_device)


def _place(dest: Any, chunk: Any) -> Any:
    """Copy ``chunk`` into ``dest`` and return ``dest``."""
    dest[...] = chunk
    return dest
