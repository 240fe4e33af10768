"""Options for the whole suite: ``--gpu-sim`` runs the GPU code on the device simulator."""

from __future__ import annotations

import pytest

# The loopback object-store servers (S3, GCS, Azure, HTTP) and the ``service`` matrix fixture.
from loopback.fixtures import azurite, gcs, http_static, s3, service  # noqa: F401


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpu-sim",
        action="store_true",
        default=False,
        help="replace cupy, nvidia.nvcomp and kvikio by the strict device simulator "
        "(tests/gpu_sim) for this run, so tests/gpu runs without a GPU",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--gpu-sim"):
        import gpu_sim

        gpu_sim.install()
