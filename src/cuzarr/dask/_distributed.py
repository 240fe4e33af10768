"""Reach Dask worker processes: a worker plugin that routes every zarr access through cuzarr.

zarr's configuration is per process, so ``cuzarr.configure()`` on the client does not reach
workers. :func:`install` registers :class:`CuzarrPlugin`; distributed runs its ``setup`` on
every worker, including workers that join later. The alternative without a plugin is the
environment of the worker processes: ``ZARR_CODEC_PIPELINE__PATH=cuzarr.Pipeline`` (plus
``CUZARR_DEVICE`` / ``CUZARR_THREADS`` / ``CUZARR_STRICT``) set before they start.
"""

from __future__ import annotations

import os
from typing import Any

from distributed import Client, WorkerPlugin

from cuzarr.config import PIPELINE_PATH

__all__ = ["CuzarrPlugin", "install", "worker_report"]

PLUGIN_NAME = "cuzarr"


class CuzarrPlugin(WorkerPlugin):
    """Run ``cuzarr.configure(**options)`` on each worker.

    Parameters
    ----------
    **options
        Arguments of :func:`cuzarr.configure` (``device``, ``strict``, ``threads``, ...).
    """

    name = PLUGIN_NAME
    # Registering again (new options) replaces the plugin and re-runs setup on every worker.
    idempotent = False

    def __init__(self, **options: Any) -> None:
        self.options = options

    def setup(self, worker: Any) -> None:
        """Configure cuzarr in the worker process (and its future child processes)."""
        from cuzarr.config import configure

        configure(**self.options)
        os.environ["ZARR_CODEC_PIPELINE__PATH"] = PIPELINE_PATH


def install(client: Client, **options: Any) -> CuzarrPlugin:
    """Make every worker of ``client``'s cluster use cuzarr's pipeline for any zarr access.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    **options
        Arguments of :func:`cuzarr.configure` applied on the workers (``device="gpu"`` on
        dask-cuda workers, ``threads=``, ``strict=``).

    Returns
    -------
    CuzarrPlugin
        The registered plugin.

    Examples
    --------
    >>> from distributed import Client  # doctest: +SKIP
    >>> client = Client()  # doctest: +SKIP
    >>> cuzarr.dask.install(client, threads=4)  # doctest: +SKIP
    """
    from cuzarr.config import configure

    configure(**options)  # validate here (a typo fails now, not on every worker)
    plugin = CuzarrPlugin(**options)
    client.register_plugin(plugin, name=PLUGIN_NAME)
    return plugin


def worker_report() -> dict[str, Any]:
    """What this process uses for zarr: pipeline path and cuzarr settings.

    Run it on workers with ``client.run(cuzarr.dask.worker_report)``.

    Returns
    -------
    dict
        ``pipeline`` (zarr's ``codec_pipeline.path``), ``device``, ``threads``, ``strict``,
        ``pid``.
    """
    import zarr

    from cuzarr.config import get_settings

    settings = get_settings()
    return {
        "pipeline": zarr.config.get("codec_pipeline.path"),
        "device": str(settings.device),
        "threads": settings.n_threads,
        "strict": settings.strict,
        "pid": os.getpid(),
    }
