"""Codec configurations, each parsed and validated once, naming the field that is wrong.

numcodecs stores most constructor arguments as given and fails only when a chunk is encoded or
decoded, which would surface as a corrupt chunk. :data:`NUMCODEC_CHECKS` checks the fields of
well-known numcodecs configurations up front (v2 filters and compressors, v3 ``numcodecs.*``);
:data:`V3_TO_NUMCODECS` turns the v3 ``zstd``, ``gzip`` and ``blosc`` configurations into the
numcodecs configurations that implement them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuzarr._json import JsonReader

__all__ = ["NUMCODEC_CHECKS", "V3_TO_NUMCODECS"]


def _zstd(r: JsonReader) -> None:
    r.only(("level", "checksum"), "codec 'zstd'")
    r.int_("level", 0, minimum=-131072, maximum=22)
    r.bool_("checksum", False)


def _deflate(name: str) -> Callable[[JsonReader], None]:
    def check(r: JsonReader) -> None:
        r.only(("level",), f"codec '{name}'")
        r.int_("level", 1, minimum=-1, maximum=9)

    return check


def _bz2(r: JsonReader) -> None:
    r.only(("level",), "codec 'bz2'")
    r.int_("level", 1, minimum=1, maximum=9)


def _lz4(r: JsonReader) -> None:
    r.only(("acceleration",), "codec 'lz4'")
    r.int_("acceleration", 1)


def _blosc(r: JsonReader) -> None:
    from numcodecs import blosc

    r.only(("cname", "clevel", "shuffle", "blocksize", "typesize"), "codec 'blosc'")
    r.choice("cname", tuple(blosc.list_compressors()), "lz4")
    r.int_("clevel", 5, minimum=0, maximum=9)
    r.int_("shuffle", 1, minimum=-1, maximum=2)
    r.int_("blocksize", 0, minimum=0)
    if r.raw("typesize", None) is not None:
        r.int_("typesize", minimum=1)


def _shuffle(r: JsonReader) -> None:
    r.only(("elementsize",), "codec 'shuffle'")
    r.int_("elementsize", 4, minimum=1)


def _checksum(name: str) -> Callable[[JsonReader], None]:
    def check(r: JsonReader) -> None:
        r.only(("location",), f"codec '{name}'")
        if r.raw("location", None) is not None:
            r.choice("location", ("start", "end"))

    return check


def _bitround(r: JsonReader) -> None:
    r.int_("keepbits", minimum=0)


#: numcodecs id -> the check of its configuration (ids not listed are left to numcodecs).
NUMCODEC_CHECKS: dict[str, Callable[[JsonReader], None]] = {
    "zstd": _zstd,
    "zlib": _deflate("zlib"),
    "gzip": _deflate("gzip"),
    "bz2": _bz2,
    "lz4": _lz4,
    "blosc": _blosc,
    "shuffle": _shuffle,
    "crc32": _checksum("crc32"),
    "crc32c": _checksum("crc32c"),
    "adler32": _checksum("adler32"),
    "bitround": _bitround,
}


def _v3_zstd(r: JsonReader) -> dict[str, Any]:
    r.only(("level", "checksum"), "codec 'zstd'")
    return {
        "level": r.int_("level", 0, minimum=-131072, maximum=22),
        "checksum": r.bool_("checksum", False),
    }


def _v3_gzip(r: JsonReader) -> dict[str, Any]:
    r.only(("level",), "codec 'gzip'")
    return {"level": r.int_("level", 5, minimum=0, maximum=9)}


_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _v3_blosc(r: JsonReader) -> dict[str, Any]:
    r.only(("cname", "clevel", "shuffle", "typesize", "blocksize"), "codec 'blosc'")
    cname = r.choice("cname", ("lz4", "lz4hc", "blosclz", "snappy", "zlib", "zstd"), "zstd")
    return {
        "cname": cname,
        "clevel": r.int_("clevel", 5, minimum=0, maximum=9),
        "shuffle": _SHUFFLES[r.choice("shuffle", tuple(_SHUFFLES), "bitshuffle")],
        "blocksize": r.int_("blocksize", 0, minimum=0),
        "typesize": r.int_("typesize", 1, minimum=1),
    }


#: v3 codec name -> (numcodecs id, the numcodecs configuration of a v3 configuration).
V3_TO_NUMCODECS: dict[str, tuple[str, Callable[[JsonReader], dict[str, Any]]]] = {
    "zstd": ("zstd", _v3_zstd),
    "gzip": ("gzip", _v3_gzip),
    "blosc": ("blosc", _v3_blosc),
}
