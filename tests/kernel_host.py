"""A kernel of cuzarr.gpu.kernels compiled with the host C++ compiler, run thread by thread.

The CUDA qualifiers and built-ins are defined for one host thread; the generated driver runs
the kernel over every (block, thread) of a one-dimensional launch, as the GPU backend
configures it, so the C source itself is tested on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HARNESS = r"""
#include <cstdint>
#define __global__
#define __device__
#define __forceinline__ inline
struct dim3_ { unsigned x, y, z; };
static dim3_ blockIdx, blockDim, threadIdx, gridDim;
static unsigned atomicXor(unsigned* address, unsigned value) {
    unsigned old = *address;
    *address = old ^ value;
    return old;
}
"""

DRIVER = r"""
extern "C" void run_kernel(%(params)s, unsigned grid, unsigned block) {
    gridDim.x = grid; blockDim.x = block; gridDim.y = gridDim.z = blockDim.y = blockDim.z = 1;
    for (unsigned b = 0; b < grid; ++b) {
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = b; threadIdx.x = t;
            %(name)s(%(args)s);
        }
    }
}
"""


def host_kernel(folder: Path, name: str, params: str, argtypes: list[Any]) -> Any:
    """Kernel ``name`` (C parameters ``params``) as ``fn(*args, grid, block)`` via ctypes.

    ``argtypes`` are the ctypes types of ``params``; skips the test without a C++ compiler.
    """
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler to run the kernel source")
    from cuzarr.gpu.kernels import SOURCE

    args = ", ".join(p.split()[-1].lstrip("*") for p in params.split(","))
    driver = DRIVER % {"params": params, "name": name, "args": args}
    lib = folder / f"{name}.so"
    proc = subprocess.run(
        [cxx, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-x", "c++", "-", "-o", str(lib)],
        input=HARNESS + SOURCE + driver,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    fn = ctypes.CDLL(str(lib)).run_kernel
    fn.restype = None
    fn.argtypes = [*argtypes, ctypes.c_uint, ctypes.c_uint]
    return fn
