"""The machine's own speed over a run of ``bench.compare``: one fixed probe, timed again and again.

Interleaving (bench/interleave.py) makes the engines of one cell see the same machine, but the
cells run one after another for most of an hour, and a shared VM's speed moves in that time:
full-512-round18 timed every engine's (e) and (f) reads 5-20 % slower than runs of those cells
alone, the codec floor (a process doing nothing but decode) included. Whether such a slowdown
is the machine's or the processes' (each engine's worker lives for the whole run) was not
measurable. The probe answers it: the same three single-threaded timings, each in a fresh
process (no engine, no worker history), at the start of the run and after every dataset.

- ``decode_ms``: one zstd(3) frame of 1 MiB decoded into a buffer already touched (the CPU and
  its caches; numcodecs' libzstd, the decoder of the floor), best of 15;
- ``fresh_ms``: 64 MiB newly allocated and written (page faults: fresh memory, which the VM's
  host may have to supply), best of 5;
- ``copy_ms``: 64 MiB copied between two buffers already touched (memory bandwidth), best of 5.

Run ``python -m bench.drift`` to print one probe as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PROBE_FIELDS", "probe", "probe_in_subprocess"]

#: The probe's timings (ms), in the order the report gives them.
PROBE_FIELDS = ("decode_ms", "fresh_ms", "copy_ms")
FRAME_BYTES = 1 << 20
BLOCK_BYTES = 64 << 20


def _frame() -> tuple[bytes, int]:
    """A zstd(3) frame of a fixed 1 MiB float32 gradient with noise (like dataset (f))."""
    from numcodecs import Zstd

    rng = np.random.default_rng(0)
    n = FRAME_BYTES // 4
    values = np.linspace(0, 1000, n, dtype=np.float32)
    values += rng.integers(0, 4, n).astype(np.float32) / 4
    return bytes(Zstd(level=3).encode(values)), n


def _best_ms(fn: Callable[[], object], repeats: int) -> float:
    """The best of ``repeats`` timings of ``fn()``, in ms."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def probe() -> dict[str, float]:
    """One probe in this process: ``decode_ms``, ``fresh_ms``, ``copy_ms`` (module docstring)."""
    from numcodecs import Zstd

    frame, n = _frame()
    codec = Zstd(level=3)
    out = np.zeros(n, np.float32)
    codec.decode(frame, out=out)  # the decoder's first call (its context) is not timed

    def fresh() -> None:
        block = np.empty(BLOCK_BYTES, np.uint8)
        block.fill(1)

    src = np.ones(BLOCK_BYTES, np.uint8)
    dst = np.zeros(BLOCK_BYTES, np.uint8)
    return {
        "decode_ms": _best_ms(lambda: codec.decode(frame, out=out), 15),
        "fresh_ms": _best_ms(fresh, 5),
        "copy_ms": _best_ms(lambda: np.copyto(dst, src), 5),
    }


def probe_in_subprocess(repo: Path) -> dict[str, Any]:
    """One probe in a fresh ``python -m bench.drift`` process, or ``{"error": ...}``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.drift"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"bench.drift exited with {proc.returncode}: {tail}"}
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
