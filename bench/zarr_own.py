"""zarr's own time: zarr's array API with a codec pipeline that does nothing.

A call through zarr's API pays for zarr's own work before and after its codec pipeline runs:
the hop from the calling thread onto zarr's event loop and back (``zarr.core.sync``), the
indexer, one ``StorePath`` and selection tuple per chunk, the output buffer of a read and the
value buffer of a write. :class:`NoOpPipeline` is zarr's default pipeline with ``read`` and
``write`` replaced by calls that take the batch (zarr builds it as a list before the call) and
return at once, reading and storing nothing. The time of a call through it is what any
pipeline plugged into zarr (cuzarr's, zarrs-python's) pays on top of its own work: a
through-zarr target of ``best peer's time`` is beyond reach for a pipeline whose own work
takes longer than ``best peer's time - zarr's own time``.

Its results are garbage by design (a read returns zarr's output buffer as allocated, a write
stores nothing), so the harness never verifies them and never counts them as a peer
(``bench.matrix.ZARR_OWN``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zarr.core.codec_pipeline import BatchedCodecPipeline


class NoOpPipeline(BatchedCodecPipeline):
    """zarr's batched pipeline whose reads and writes take their batch and do nothing else."""

    async def read(
        self, batch_info: Iterable[Any], out: Any, drop_axes: tuple[int, ...] = ()
    ) -> tuple[dict[str, str], ...]:
        """Take the batch; report every chunk present; leave ``out`` as zarr allocated it."""
        return tuple({"status": "present"} for _ in batch_info)

    async def write(
        self, batch_info: Iterable[Any], value: Any, drop_axes: tuple[int, ...] = ()
    ) -> None:
        """Take the batch; store nothing."""
        for _ in batch_info:
            pass


def register() -> None:
    """Make :class:`NoOpPipeline` selectable through zarr's ``codec_pipeline.path``."""
    from zarr.registry import register_pipeline

    register_pipeline(NoOpPipeline)
