"""Execution backends: the CPU thread pool, and (lazily) the CUDA backend."""

from __future__ import annotations

from cuzarr.backends.pool import cpu_pool, parallel_map
from cuzarr.backends.probe import gpu_status, require_gpu

__all__ = ["cpu_pool", "gpu_status", "require_gpu", "parallel_map"]
