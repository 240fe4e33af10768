"""``cuzarr copy``'s options and report: codec and shape choices parsed, what a copy did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cuzarr.errors import CuzarrError

__all__ = [
    "BLOSC_CNAMES",
    "BLOSC_SHUFFLES",
    "CodecChoice",
    "CopyError",
    "CopyOptions",
    "CopyReport",
    "ShardsOption",
    "parse_codec",
    "parse_shape",
]

#: Blosc shuffle names (by numcodecs' number) and compressor names.
BLOSC_SHUFFLES = ("noshuffle", "shuffle", "bitshuffle")
BLOSC_CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib")
#: ``CopyOptions.shards``: a shard shape, keep the source's, or none.
ShardsOption = tuple[int, ...] | Literal["keep", "none"]


class CopyError(CuzarrError, ValueError):
    """A copy cannot start or continue (bad options, existing destination, failed check)."""


@dataclass(frozen=True, slots=True)
class CodecChoice:
    """A compressor named on the command line (``zstd:3``, ``blosc:zstd:5:shuffle``...).

    Attributes
    ----------
    name : {"none", "zstd", "gzip", "blosc"}
        The compressor; ``none`` stores chunks uncompressed.
    level : int or None
        Compression level (the codec's default when ``None``).
    cname : str
        Blosc's inner compressor.
    shuffle : str
        Blosc's shuffle: ``noshuffle``, ``shuffle`` or ``bitshuffle``.
    """

    name: str
    level: int | None = None
    cname: str = "zstd"
    shuffle: str = "shuffle"

    def compressors(self, zarr_format: int, itemsize: int) -> Any:
        """The ``compressors=`` argument of ``zarr.create_array`` for this choice."""
        if self.name == "none":
            return None
        if zarr_format == 3:
            from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

            if self.name == "zstd":
                return ZstdCodec(level=3 if self.level is None else self.level)
            if self.name == "gzip":
                return GzipCodec(level=5 if self.level is None else self.level)
            return BloscCodec(
                cname=self.cname,  # type: ignore[arg-type]
                clevel=5 if self.level is None else self.level,
                shuffle=self.shuffle,  # type: ignore[arg-type]
                typesize=itemsize,
            )
        import numcodecs

        if self.name == "zstd":
            return numcodecs.Zstd(level=3 if self.level is None else self.level)
        if self.name == "gzip":
            return numcodecs.GZip(level=5 if self.level is None else self.level)
        return numcodecs.Blosc(
            cname=self.cname,
            clevel=5 if self.level is None else self.level,
            shuffle=BLOSC_SHUFFLES.index(self.shuffle),
        )


def parse_codec(text: str) -> CodecChoice:
    """Parse ``none``, ``zstd[:LEVEL]``, ``gzip[:LEVEL]`` or ``blosc[:CNAME[:LEVEL[:SHUFFLE]]]``.

    Parameters
    ----------
    text : str
        The specification.

    Returns
    -------
    CodecChoice

    Raises
    ------
    ValueError
        Naming what is wrong in ``text``.
    """
    parts = text.strip().lower().split(":")
    name, args = parts[0], parts[1:]

    def level(value: str, lo: int, hi: int) -> int:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"codec {text!r}: level {value!r} is not an integer") from None
        if not lo <= n <= hi:
            raise ValueError(f"codec {text!r}: level {n} is outside {lo}..{hi}")
        return n

    if name == "none" and not args:
        return CodecChoice("none")
    if name == "zstd" and len(args) <= 1:
        return CodecChoice("zstd", level(args[0], -131072, 22) if args else None)
    if name == "gzip" and len(args) <= 1:
        return CodecChoice("gzip", level(args[0], 0, 9) if args else None)
    if name == "blosc" and len(args) <= 3:
        cname = args[0] if args else "zstd"
        if cname not in BLOSC_CNAMES:
            raise ValueError(
                f"codec {text!r}: blosc compressor {cname!r} is not one of "
                f"{', '.join(BLOSC_CNAMES)}"
            )
        lvl = level(args[1], 0, 9) if len(args) > 1 else None
        shuffle = args[2] if len(args) > 2 else "shuffle"
        if shuffle not in BLOSC_SHUFFLES:
            raise ValueError(
                f"codec {text!r}: blosc shuffle {shuffle!r} is not one of "
                f"{', '.join(BLOSC_SHUFFLES)}"
            )
        return CodecChoice("blosc", lvl, cname, shuffle)
    raise ValueError(
        f"codec {text!r}: expected none, zstd[:LEVEL], gzip[:LEVEL] or "
        "blosc[:CNAME[:LEVEL[:SHUFFLE]]]"
    )


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse a shape such as ``64,64,64`` (positive integers separated by commas).

    Raises
    ------
    ValueError
        Naming the bad entry.
    """
    items = [p.strip() for p in text.split(",")]
    out: list[int] = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"shape {text!r}: expected positive integers separated by commas")
        out.append(int(item))
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyOptions:
    """What the destination looks like; every option left out keeps the source's.

    Attributes
    ----------
    codec : str or None
        Compressor specification (:func:`parse_codec`); ``None`` keeps the source's.
    chunks : tuple of int or None
        (Inner) chunk shape for every array; ``None`` keeps the source's.
    shards : tuple of int, "keep" or "none"
        Shard shape, the source's (``keep``), or no sharding (``none``).
    zarr_format : {2, 3} or None
        Destination format; ``None`` keeps the source's.
    """

    codec: str | None = None
    chunks: tuple[int, ...] | None = None
    shards: ShardsOption = "keep"
    zarr_format: int | None = None

    def __post_init__(self) -> None:
        if self.codec is not None:
            parse_codec(self.codec)
        if self.zarr_format not in (None, 2, 3):
            raise ValueError(f"zarr_format: expected 2 or 3, got {self.zarr_format!r}")
        if self.zarr_format == 2 and isinstance(self.shards, tuple):
            raise ValueError("Zarr format 2 has no sharding: --shards needs --zarr-format 3")

    def to_json(self) -> dict[str, Any]:
        """The options as JSON (recorded in the journal)."""
        return {
            "codec": self.codec,
            "chunks": None if self.chunks is None else list(self.chunks),
            "shards": self.shards if isinstance(self.shards, str) else list(self.shards),
            "zarr_format": self.zarr_format,
        }


@dataclass(slots=True, kw_only=True)
class CopyReport:
    """What :func:`copy` did.

    Attributes
    ----------
    source, destination : str
        The stores.
    arrays, groups : int
        Nodes copied.
    blocks_total : int
        Blocks in every array's plan.
    blocks_written : int
        Blocks written by this call.
    blocks_skipped : int
        Blocks a previous, interrupted call had finished (``resume=True``).
    bytes_copied : int
        Decoded bytes written by this call.
    verified : bool
        Whether every written block was read back and compared with the source.
    resumed : bool
        Whether a journal was found and continued.
    """

    source: str
    destination: str
    arrays: int = 0
    groups: int = 0
    blocks_total: int = 0
    blocks_written: int = 0
    blocks_skipped: int = 0
    bytes_copied: int = 0
    verified: bool = True
    resumed: bool = False
    nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (schema ``cuzarr.copy/1``, see ``docs/cli.md``)."""
        return {
            "schema": "cuzarr.copy/1",
            "source": self.source,
            "destination": self.destination,
            "arrays": self.arrays,
            "groups": self.groups,
            "nodes": self.nodes,
            "blocks_total": self.blocks_total,
            "blocks_written": self.blocks_written,
            "blocks_skipped": self.blocks_skipped,
            "bytes_copied": self.bytes_copied,
            "verified": self.verified,
            "resumed": self.resumed,
        }

    def format(self) -> str:
        """A one-line summary for people."""
        resumed = f", {self.blocks_skipped} done before (resumed)" if self.resumed else ""
        check = "verified" if self.verified else "not verified"
        return (
            f"copied {self.arrays} arrays and {self.groups} groups to {self.destination}: "
            f"{self.blocks_written} blocks, {self.bytes_copied} bytes written{resumed}; {check}"
        )

