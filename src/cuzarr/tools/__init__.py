"""Library side of the ``cuzarr info``, ``cuzarr copy`` and ``cuzarr verify`` commands.

Each command's logic lives here, usable from Python without the command line:

>>> from cuzarr.tools import collect_info, copy, verify  # doctest: +SKIP
>>> report = verify("data.zarr")  # doctest: +SKIP
>>> report.ok  # doctest: +SKIP
True
"""

from __future__ import annotations

from cuzarr.tools.copy import CopyOptions, CopyReport, copy, parse_codec, parse_shape
from cuzarr.tools.info import NodeInfo, collect_info, format_info, info_to_json
from cuzarr.tools.verify import Problem, VerifyReport, verify

__all__ = [
    "CopyOptions",
    "CopyReport",
    "NodeInfo",
    "Problem",
    "VerifyReport",
    "collect_info",
    "copy",
    "format_info",
    "info_to_json",
    "parse_codec",
    "parse_shape",
    "verify",
]
