"""Pinned host staging for the GPU's host copies, of bounded size, and the wave upload.

A thread copies a wave between host and device through its own pinned buffer
(:class:`PinnedStage`): page-locked memory the DMA engines read and write at full speed
(51.7 GiB/s host-to-device on the H100 of bench/results/gpu-check-2026-12-06, where pageable
memory goes through the driver's own staging). Waves are sized for the device (up to
``Settings.gpu_wave_bytes``, 1 GiB by default), so a buffer the size of the largest wave a
thread has seen would pin that much host memory per thread for the life of the process (a
Dask pool of 16 threads: up to 16 GiB locked). The buffer stops growing at
:data:`STAGE_BYTES` instead, and larger waves go through it in windows, one synchronous copy
each (``cudaMemcpy`` from pinned memory returns when the copy is done, so the next window may
overwrite the buffer): a window of 64 MiB takes ~1.3 ms to copy at that speed and ~10 ms to
pack on the host, so the windows cost little against one copy of the whole.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.gpu.files import ALIGN
from cuzarr.gpu.plan import layout, pack_window

__all__ = ["MIN_STAGE_BYTES", "STAGE_BYTES", "PinnedStage", "upload"]

#: The most pinned memory one thread's stage holds for wave copies (a wave larger than this
#: goes through it in windows; a single decoded chunk larger than this is the exception: the
#: stage grows to one chunk, the unit a download places).
STAGE_BYTES = 64 * 1024 * 1024

#: The smallest stage allocated (small waves do not allocate again and again as they grow).
MIN_STAGE_BYTES = 1 << 20


class PinnedStage:
    """A pinned host buffer per thread, grown on demand up to :data:`STAGE_BYTES`.

    Parameters
    ----------
    name : str
        What the stage is for (in :meth:`held`'s report and tests).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._local = threading.local()

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """At least ``nbytes`` of this thread's pinned memory (its previous contents dropped).

        Callers ask for at most :data:`STAGE_BYTES` unless one unit of their copy (a decoded
        chunk) is larger; the buffer then grows to that unit.
        """
        buf: npt.NDArray[np.uint8] | None = getattr(self._local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            size = max(nbytes, min(STAGE_BYTES, max(MIN_STAGE_BYTES, 2 * _held(buf))))
            mem = cupy.cuda.alloc_pinned_memory(size)
            buf = np.frombuffer(mem, np.uint8, count=size)
            self._local.buf = buf
        return buf

    def held(self) -> int:
        """Bytes of pinned memory this thread's stage holds."""
        return _held(getattr(self._local, "buf", None))


def _held(buf: npt.NDArray[np.uint8] | None) -> int:
    return 0 if buf is None else int(buf.nbytes)


_uploads = PinnedStage("uploads")


def upload(
    parts: Sequence[Buf], leads: Sequence[int] | None = None
) -> tuple[Any, list[int], list[int]]:
    """Pack host byte strings into one device buffer, through this thread's pinned stage.

    Returns the device buffer and each part's offset (``ALIGN``-aligned, as nvCOMP wants its
    inputs; with ``leads``, byte ``leads[i]`` of each part is the aligned one) and size. The
    packed layout (:func:`~cuzarr.gpu.plan.layout`) is filled in the stage and copied window
    by window (:func:`~cuzarr.gpu.plan.pack_window`): one window, so one copy, for a wave of
    at most :data:`STAGE_BYTES` packed bytes.
    """
    sizes = [memoryview(p).nbytes for p in parts]
    offsets, total = layout(sizes, align=ALIGN, leads=leads)
    starts = offsets.tolist()
    dev = cupy.empty(max(1, total), cupy.uint8)
    if total:
        stage = _uploads.get(min(total, STAGE_BYTES))
        for lo in range(0, total, STAGE_BYTES):
            window = stage[: min(STAGE_BYTES, total - lo)]
            pack_window(parts, starts, lo, window)
            dev[lo : lo + window.size].set(window)  # synchronous from pinned memory
    return dev, starts, sizes
