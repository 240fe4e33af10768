"""cuzarr's settings and :func:`configure`, the one switch that routes zarr through cuzarr.

Settings are a frozen dataclass. Each :class:`cuzarr.Pipeline` captures the settings in force
when zarr creates it (so they travel with a pickled array to Dask workers); the explicit API
takes them per call. Environment variables give the defaults, so worker processes started with
the same environment behave the same: ``CUZARR_THREADS``, ``CUZARR_STRICT``, ``CUZARR_DEVICE``,
``CUZARR_ZSTD_ENCODER``, ``CUZARR_GPU_CROSSOVER_BYTES``, ``CUZARR_GPU_WAVE_BYTES``.
"""

from __future__ import annotations

import enum
import functools
import os
import threading
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Self

from cuzarr.backends.probe import gpu_status, require_gpu
from cuzarr.diagnostics import logger

__all__ = [
    "Device",
    "Settings",
    "configure",
    "get_settings",
    "resolve_device",
    "settings_for",
    "zarr_gpu_buffers_for",
]

PIPELINE_PATH = "cuzarr.Pipeline"
#: ``Settings.zstd_encoder`` values.
ZSTD_ENCODERS = ("zstandard", "numcodecs")


class Device(enum.StrEnum):
    """Where chunks are decoded."""

    AUTO = "auto"
    CPU = "cpu"
    GPU = "gpu"


#: Default of :attr:`Settings.gpu_wave_bytes`.
GPU_WAVE_BYTES = 1 << 30


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"Environment variable {name}: expected an integer, got {raw!r}") from exc
    if value < 1:
        raise ValueError(f"Environment variable {name}: expected an integer >= 1, got {raw!r}")
    return value


def _env_bool(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"Environment variable {name}: expected a boolean, got {raw!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Engine settings.

    Attributes
    ----------
    device : Device
        ``cpu`` (NumPy results), ``gpu`` (CuPy results, decoded on the GPU) or ``auto`` (the
        default: NumPy results, decoded on the GPU where a usable GPU is there and an array's
        decoded chunk is at least ``gpu_crossover_bytes``, else on the CPU).
    strict : bool
        Raise :class:`~cuzarr.errors.UnsupportedError` instead of falling back to zarr-python's
        pipeline.
    threads : int or None
        Worker threads of the CPU engine; ``None`` means one per core. A write small enough
        to run as one task on the calling thread lends its call into the batch helper
        ``threads - 1`` of that library's own threads instead (they wake without the GIL).
    max_gap : int
        Largest gap in bytes bridged when coalescing byte ranges of one shard on local
        folders and memory, where a read costs microseconds.
    remote_max_gap : int
        The same on remote stores (object stores, fsspec), where a request costs a round trip
        of milliseconds: fetching up to 1 MiB of unneeded bytes is cheaper than another
        request (zarr-python bridges the same 1 MiB).
    max_overfetch : int
        On remote stores, a partial read of a shard whose index is not cached fetches the
        whole shard, index included, in one request instead of two (index, then ranges) when
        the bytes it does not need, estimated from the shard's decoded size, are at most this.
        ``0`` turns it off.
    cache_bytes : int
        Bytes of whole objects (chunks, shards fetched whole) that a ``cuzarr.Array`` on a
        remote store keeps across reads, least recently used out first; ``0`` (the default)
        keeps none. For data nobody else rewrites while the array is open (see
        :mod:`cuzarr.stores.cached`).
    max_coalesced : int
        Largest coalesced range in bytes.
    max_bytes_in_flight : int
        Bound on decoded-but-not-scattered and fetched-but-not-decoded bytes for huge reads
        and writes on the CPU (host memory); the GPU backends' waves use ``gpu_wave_bytes``.
    max_chunk_nbytes : int
        Refuse arrays whose single chunk would decode to more than this (untrusted metadata).
    io_concurrency : int
        Requests in flight at once on remote stores (object stores, fsspec), where a request
        costs milliseconds of waiting, not CPU.
    zstd_encoder : {"zstandard", "numcodecs"}
        The library zstd chunks are compressed with (at the chain's level and checksum flag).
        ``"zstandard"`` (the default): python-zstandard, a reused context per thread and many
        small chunks per GIL-free call (1.2x to 1.7x numcodecs' speed on this project's
        benchmarks); its frames are valid zstd that every reader decodes (zarr-python,
        numcodecs, zarrs-python, TensorStore: tested), but not byte for byte the frames
        zarr-python writes (another libzstd release). ``"numcodecs"``: the libzstd inside
        numcodecs, as zarr-python uses it, so stored chunks equal zarr-python's byte for byte
        (small chunks batched through the batch helper). ``CUZARR_ZSTD_ENCODER`` sets the
        default of :func:`get_settings`.
    gpu_crossover_bytes : int or None
        The decoded chunk size (for sharded arrays the inner chunk's: one unit of decoder
        work) from which ``device="auto"`` decodes on the GPU (results still NumPy arrays,
        brought to the host a wave at a time: ``cuzarr.gpu.host_backend.GpuHostBackend``).
        ``None`` (the default): no crossover measured on this machine, so ``auto`` stays on the
        CPU. ``bench/gpu_check/measure.py`` reports ``recommended_gpu_crossover_bytes``;
        ``CUZARR_GPU_CROSSOVER_BYTES`` sets the default of :func:`get_settings`.
    gpu_wave_bytes : int
        Decoded bytes of one wave on the GPU backends (one nvCOMP call per algorithm), at most
        a quarter of the device's free memory when the wave is planned. nvCOMP decodes each
        stream mostly on its own (measured on an H100: ~0.1 GB/s a stream for LZ4, 0.3-0.6
        for zstd), so a wave needs many streams to fill the device: the default, 1 GiB, is
        128 chunks of 8 MiB, where nvCOMP's batched zstd decode ran at 53 GiB/s. Host
        copies of a wave go through each thread's pinned stage (at most 64 MiB,
        :mod:`cuzarr.gpu.pinned`) in windows. ``CUZARR_GPU_WAVE_BYTES`` sets
        the default of :func:`get_settings`.
    """

    device: Device = Device.AUTO
    strict: bool = False
    threads: int | None = None
    max_gap: int = 64 * 1024
    remote_max_gap: int = 1024 * 1024
    max_overfetch: int = 2 * 1024 * 1024
    cache_bytes: int = 0
    max_coalesced: int = 16 * 1024 * 1024
    max_bytes_in_flight: int = 64 * 1024 * 1024
    max_chunk_nbytes: int = 2**31
    io_concurrency: int = 32
    zstd_encoder: str = "zstandard"
    gpu_crossover_bytes: int | None = None
    gpu_wave_bytes: int = GPU_WAVE_BYTES

    def __post_init__(self) -> None:
        crossover = self.gpu_crossover_bytes
        if crossover is not None and (
            isinstance(crossover, bool) or not isinstance(crossover, int) or crossover < 1
        ):
            raise ValueError(
                f"Settings.gpu_crossover_bytes: expected None or an integer >= 1, got {crossover!r}"
            )
        wave = self.gpu_wave_bytes
        if isinstance(wave, bool) or not isinstance(wave, int) or wave < 1:
            raise ValueError(
                f"Settings.gpu_wave_bytes: expected an integer >= 1, got {wave!r}"
            )
        if self.zstd_encoder not in ZSTD_ENCODERS:
            raise ValueError(
                f"Settings.zstd_encoder: expected one of {', '.join(ZSTD_ENCODERS)}, got "
                f"{self.zstd_encoder!r}"
            )

    @classmethod
    def from_env(cls) -> Settings:
        """Settings from ``CUZARR_*`` environment variables."""
        device = os.environ.get("CUZARR_DEVICE", "auto").strip().lower() or "auto"
        try:
            dev = Device(device)
        except ValueError as exc:
            raise ValueError(
                f"Environment variable CUZARR_DEVICE: expected auto, cpu or gpu, got {device!r}"
            ) from exc
        encoder = os.environ.get("CUZARR_ZSTD_ENCODER", "").strip().lower() or "zstandard"
        if encoder not in ZSTD_ENCODERS:
            raise ValueError(
                "Environment variable CUZARR_ZSTD_ENCODER: expected "
                f"{' or '.join(ZSTD_ENCODERS)}, got {encoder!r}"
            )
        return cls(
            device=dev,
            strict=_env_bool("CUZARR_STRICT"),
            threads=_env_int("CUZARR_THREADS"),
            zstd_encoder=encoder,
            gpu_crossover_bytes=_env_int("CUZARR_GPU_CROSSOVER_BYTES"),
            gpu_wave_bytes=_env_int("CUZARR_GPU_WAVE_BYTES") or GPU_WAVE_BYTES,
        )

    @property
    def n_threads(self) -> int:
        """Resolved worker thread count."""
        return self.threads or _cpu_count()


@functools.cache
def _cpu_count() -> int:
    """``os.cpu_count()``, asked once: it costs microseconds per call and every read needs it."""
    return os.cpu_count() or 1


_lock = threading.Lock()
_current: Settings | None = None


def get_settings() -> Settings:
    """Return the settings in force (from the environment until :func:`configure` is called)."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = Settings.from_env()
    return _current


def _set_settings(settings: Settings | None) -> None:
    global _current
    with _lock:
        _current = settings


#: zarr's configuration for GPU buffers (what ``zarr.config.enable_gpu()`` sets), and the defaults.
_ZARR_GPU_BUFFERS = {"buffer": "zarr.buffer.gpu.Buffer", "ndbuffer": "zarr.buffer.gpu.NDBuffer"}
_ZARR_CPU_BUFFERS = {"buffer": "zarr.buffer.cpu.Buffer", "ndbuffer": "zarr.buffer.cpu.NDBuffer"}
#: What :class:`configure` sets for NumPy results: zarr's CPU buffers, reads' outputs on a
#: cache line (:class:`cuzarr.zarr_buffers.AlignedNDBuffer`).
_CUZARR_CPU_BUFFERS = {
    "buffer": "zarr.buffer.cpu.Buffer",
    "ndbuffer": "cuzarr.zarr_buffers.AlignedNDBuffer",
}


def zarr_gpu_buffers_for(settings: Settings) -> str | None:
    """Switch zarr to its GPU buffers for ``device="gpu"`` set by the environment.

    With ``CUZARR_DEVICE=gpu`` and no :class:`configure` call, this makes plain zarr reads
    return CuPy arrays, as ``configure(device="gpu")`` does. Called when zarr builds cuzarr's
    pipeline for an array; a no-op for other devices and when zarr already uses non-default
    buffers (``zarr.config.enable_gpu()``, or a user's own). Returns why it could not (no
    usable GPU: zarr keeps its CPU buffers), else ``None``.
    """
    if settings.device is not Device.GPU:
        return None
    import zarr

    if {k: zarr.config.get(k) for k in _ZARR_CPU_BUFFERS} not in (
        _ZARR_CPU_BUFFERS,
        _CUZARR_CPU_BUFFERS,
    ):
        return None
    status = gpu_status()
    if status is not None:
        return f"CUZARR_DEVICE=gpu, but {status}"
    zarr.config.set(_ZARR_GPU_BUFFERS)
    logger.info("CUZARR_DEVICE=gpu: zarr now uses its GPU buffers (reads return CuPy arrays)")
    return None


class configure:
    """Route every zarr-python read and write through cuzarr.

    Sets zarr's ``codec_pipeline.path`` to ``cuzarr.Pipeline`` and updates cuzarr's settings.
    Where zarr uses its default CPU buffers (or its GPU ones and ``device="cpu"``), it also
    sets zarr's ``ndbuffer`` to :class:`cuzarr.zarr_buffers.AlignedNDBuffer`: zarr's own, with
    the outputs of reads of 4 MiB or more on a cache line, which the pipeline fills with
    streaming stores where they pay. Works as a plain call (the change stays) or as a context
    manager (restored on exit).

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}, optional
        Where to decode. ``"gpu"`` also switches zarr to its GPU buffers (as
        ``zarr.config.enable_gpu()`` does), so plain zarr reads return CuPy arrays decoded on
        the GPU; ``"cpu"`` switches them back if they were. zarr's GPU buffers reach cuzarr's
        GPU backend whatever ``device`` says.
    strict : bool, optional
        Raise instead of falling back to zarr-python's pipeline.
    threads : int, optional
        CPU worker threads.
    **options
        Other :class:`Settings` fields (``max_gap``, ``max_coalesced``,
        ``gpu_crossover_bytes``, ...).

    Examples
    --------
    >>> import cuzarr, zarr
    >>> with cuzarr.configure(strict=True):
    ...     pass  # zarr reads and writes here go through cuzarr
    """

    def __init__(
        self,
        device: str | Device | None = None,
        *,
        strict: bool | None = None,
        threads: int | None = None,
        **options: Any,
    ) -> None:
        import zarr

        changes: dict[str, Any] = dict(options)
        if device is not None:
            changes["device"] = Device(device)
        if strict is not None:
            changes["strict"] = strict
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
            changes["threads"] = threads
        unknown = set(changes) - set(Settings.__dataclass_fields__)
        if unknown:
            raise TypeError(f"configure() got unknown options: {', '.join(sorted(unknown))}")
        self._previous_settings = get_settings()
        self._previous_path = zarr.config.get("codec_pipeline.path")
        self._previous_buffers = {k: zarr.config.get(k) for k in _ZARR_GPU_BUFFERS}
        new = replace(self._previous_settings, **changes)
        if new.device is Device.GPU:
            require_gpu()
        _set_settings(new)
        zarr.config.set({"codec_pipeline.path": PIPELINE_PATH})
        if new.device is Device.GPU:
            # zarr's buffer prototype decides what zarr returns: CuPy arrays, as kvikio's
            # zarr.config.enable_gpu() does; cuzarr's pipeline then decodes on the GPU.
            zarr.config.set(_ZARR_GPU_BUFFERS)
        elif self._previous_buffers == _ZARR_CPU_BUFFERS or (
            new.device is Device.CPU and self._previous_buffers == _ZARR_GPU_BUFFERS
        ):
            from zarr.registry import register_ndbuffer

            from cuzarr.zarr_buffers import AlignedNDBuffer

            register_ndbuffer(AlignedNDBuffer)
            zarr.config.set(_CUZARR_CPU_BUFFERS)
        self.settings = new

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import zarr

        zarr.config.set({"codec_pipeline.path": self._previous_path, **self._previous_buffers})
        _set_settings(self._previous_settings)


def resolve_device(device: Device) -> Device:
    """The device results live on: ``GPU`` for ``gpu`` (checked), ``CPU`` otherwise.

    ``auto`` returns NumPy arrays: the result type never depends on the machine. Whether its
    chunks are decoded on the GPU (``Settings.gpu_crossover_bytes``) is decided per array by
    :func:`cuzarr.backends.select.backend_for`.
    """
    if device is Device.GPU:
        require_gpu()
        return Device.GPU
    return Device.CPU


def settings_for(settings: Settings | None, device: str | Device | None) -> Settings:
    """``settings`` (default: the current ones) with ``device`` applied, checked if GPU."""
    base = get_settings() if settings is None else settings
    if device is None:
        return base
    dev = Device(device)
    if dev is Device.GPU:
        require_gpu()
    return base if base.device is dev else replace(base, device=dev)
