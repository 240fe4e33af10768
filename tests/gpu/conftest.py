"""The GPU suite: every test here is marked ``gpu``.

It runs on a real GPU when one is usable, under the device simulator with ``--gpu-sim``
(``make gpu-sim``, CI), and is skipped otherwise.
"""

from __future__ import annotations

import pytest

import cuzarr
from cuzarr.backends import gpu_status


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    status = gpu_status()
    skip = pytest.mark.skip(reason=f"no usable GPU: {status} (or run with --gpu-sim)")
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("gpu/"):
            item.add_marker(pytest.mark.gpu)
            if status is not None:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_device_record() -> None:
    """Each test starts with an empty simulator record (a no-op on a real GPU)."""
    try:
        import gpu_sim
    except ImportError:  # pragma: no cover - tests/ is always on sys.path here
        return
    if gpu_sim.installed():
        gpu_sim.reset()


@pytest.fixture
def sim():
    """The device simulator, its record and cuzarr's counters reset (skips on a real GPU)."""
    gpu_sim = pytest.importorskip("gpu_sim")
    if not gpu_sim.installed():
        pytest.skip("reads the device simulator's record (run with --gpu-sim)")
    gpu_sim.reset()
    cuzarr.reset_stats()
    return gpu_sim
