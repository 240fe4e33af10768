"""What nvCOMP 6.0.0 does with corrupt streams on a real GPU (H200, 2026-12-04).

Measured by bench/gpu_check/probe_c_faults.py and this suite (bench/results/gpu-check-2026-12-04):

- short outputs are reported: a zstd frame with a zeroed tail decoded to 7,428 of 16,384
  bytes, a truncated LZ4 block to 9,685, a valid zlib body of 12 bytes to 12; cuzarr's size
  check names those chunks (the statuses stayed ``nvcompSuccess``);
- some corrupt zstd frames decode with ``nvcompSuccess`` and their full declared size (a
  128-byte chunk with its second half zeroed): nothing on the device tells; only a checksum
  in the chain (crc32c) or a CPU decode catches them;
- a raw deflate stream with its second half zeroed, and a truncated zstd frame at the end of
  its device buffer, make nvCOMP's kernels fault (``cudaErrorIllegalAddress`` or
  ``cudaErrorLaunchFailure``), nvCOMP's own Python API as much as the C API: the CUDA context
  is lost for the rest of the process, and no check after the fact can run. zstd frames are
  now walked block by block before nvCOMP sees them (``cuzarr.gpu.zstd_frames``, not yet run
  on a GPU), which stops truncated ones; deflate has no such cheap structure.

Tests of those cases run under the device simulator (which models what the CPU libraries
reject) and are marked here on a real GPU, so that one bad stream does not end the suite.
"""

from __future__ import annotations

import pytest

DECODES_AS_SUCCESS = (
    "nvCOMP 6.0.0 decodes this corrupt zstd frame with nvcompSuccess and its full size"
    " (H200, 2026-12-04): undetectable on the device without a checksum"
)
FAULTS_THE_CONTEXT = (
    "nvCOMP 6.0.0 faults the CUDA context on this corrupt stream (cudaErrorIllegalAddress,"
    " H200, 2026-12-04): the rest of the suite would fail on a dead context"
)


def on_real_gpu() -> bool:
    """Whether tests/gpu runs on a GPU (not under the device simulator)."""
    try:
        import gpu_sim
    except ImportError:  # pragma: no cover - tests/ is on sys.path
        return True
    return not gpu_sim.installed()


def expect_undetected(request: pytest.FixtureRequest) -> None:
    """On a real GPU, the test must fail as measured (strict xfail: a pass is reported)."""
    if on_real_gpu():
        request.applymarker(pytest.mark.xfail(reason=DECODES_AS_SUCCESS, strict=True))


def skip_if_it_faults() -> None:
    """On a real GPU, skip a stream that kills the CUDA context."""
    if on_real_gpu():
        pytest.skip(FAULTS_THE_CONTEXT)
