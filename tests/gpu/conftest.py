"""The GPU suite: every test here is marked ``gpu`` and skipped where no GPU is usable."""

from __future__ import annotations

import pytest

from cuzarr.backends import gpu_status


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    status = gpu_status()
    skip = pytest.mark.skip(reason=f"no usable GPU: {status}")
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("gpu/"):
            item.add_marker(pytest.mark.gpu)
            if status is not None:
                item.add_marker(skip)
