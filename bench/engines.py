"""How each engine opens, reads and writes an array (one adapter per worker process)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench.matrix import ZARR_OWN, ZARR_PIPELINES


class Unsupported(Exception):
    """The engine refuses this case (recorded as n/a, never as a number)."""


class EngineAdapter:
    """How one engine opens, reads and writes an array (one instance per worker process)."""

    name: str
    #: Whether the engine's results are checked against the expected data (all but
    #: ``zarr-own``, whose pipeline returns garbage by design: bench/zarr_own.py).
    verifies = True

    def open(self, path: Path, writable: bool = False) -> Any:
        raise NotImplementedError

    def read(self, h: Any, sel: Any) -> np.ndarray:
        return np.asarray(h[sel])

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = h[sel]

    def write(self, h: Any, sel: Any, value: np.ndarray) -> None:
        h[sel] = value

    def pipeline(self, h: Any) -> str:
        return self.name


class ZarrAdapter(EngineAdapter):
    def __init__(self, name: str, threads: int) -> None:
        import zarr

        self.name = name
        self.zarr = zarr
        options: dict[str, Any] = {
            "threading.max_workers": threads,
            "codec_pipeline.max_workers": threads,
        }
        if name == "cuzarr":
            import cuzarr

            cuzarr.configure(threads=threads, strict=True)
        else:
            if name == ZARR_OWN:
                from bench import zarr_own

                zarr_own.register()
                self.verifies = False
            options["codec_pipeline.path"] = ZARR_PIPELINES[name]
        if name == "zarrs":
            options["codec_pipeline.strict"] = True
        zarr.config.set(options)

    def open(self, path: Path, writable: bool = False) -> Any:
        arr = self.zarr.open_array(store=str(path), mode="r+" if writable else "r")
        self.pipeline(arr)
        return arr

    def pipeline(self, h: Any) -> str:
        cls = type(h.async_array.codec_pipeline)
        got = f"{cls.__module__}.{cls.__qualname__}"
        want = ZARR_PIPELINES[self.name]
        if got != want and not (self.name == "zarrs" and got.startswith("zarrs.")):
            raise RuntimeError(f"{self.name}: zarr built {got}, not {want}")
        if self.name == "zarrs" and getattr(h.async_array.codec_pipeline, "impl", 1) is None:
            raise Unsupported("zarrs cannot handle this array")
        return got

    def read(self, h: Any, sel: Any) -> np.ndarray:
        try:
            return np.asarray(h[sel])
        except Exception as exc:
            self._unsupported(exc)
            raise

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = self.read(h, sel)

    def _unsupported(self, exc: Exception) -> None:
        if self.name == "zarrs" and type(exc).__module__.startswith("zarrs"):
            raise Unsupported(f"zarrs (strict): {type(exc).__name__}: {exc}") from exc


class CuzarrApiAdapter(EngineAdapter):
    def __init__(self, threads: int) -> None:
        import cuzarr

        self.name = "cuzarr-api"
        self.cuzarr = cuzarr
        self.settings = cuzarr.Settings(threads=threads, strict=True)

    def open(self, path: Path, writable: bool = False) -> Any:
        return self.cuzarr.open(str(path), "r+" if writable else "r", settings=self.settings)

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        h.read(sel, out=out)

    def pipeline(self, h: Any) -> str:
        return "cuzarr.Array"


class TensorStoreAdapter(EngineAdapter):
    def __init__(self, threads: int) -> None:
        import tensorstore as ts

        self.name = "tensorstore"
        self.ts = ts
        self.context = ts.Context(
            {
                "data_copy_concurrency": {"limit": threads},
                "file_io_concurrency": {"limit": threads},
            }
        )

    def open(self, path: Path, writable: bool = False) -> Any:
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
        return self.ts.open(spec, context=self.context, read=True, write=writable).result()

    def read(self, h: Any, sel: Any) -> np.ndarray:
        return np.asarray(h[sel].read().result())

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = h[sel].read().result()

    def write(self, h: Any, sel: Any, value: np.ndarray) -> None:
        h[sel].write(value).result()

    def pipeline(self, h: Any) -> str:
        return f"tensorstore {importlib.metadata.version('tensorstore')}"


def make_adapter(name: str, threads: int) -> EngineAdapter:
    if name in ZARR_PIPELINES:
        return ZarrAdapter(name, threads)
    if name == "cuzarr-api":
        return CuzarrApiAdapter(threads)
    if name == "tensorstore":
        return TensorStoreAdapter(threads)
    raise ValueError(f"unknown engine {name!r}")
