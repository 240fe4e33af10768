"""Parsing of Zarr v2 and v3 array metadata into :class:`ArraySpec`."""

from cuzarr.metadata.load import GroupSpec, normalize_node_path, read_array_spec, read_node
from cuzarr.metadata.spec import ArraySpec, ChunkKeyEncoding, CodecSpec, Order
from cuzarr.metadata.v2 import parse_v2
from cuzarr.metadata.v3 import parse_v3

__all__ = [
    "ArraySpec",
    "ChunkKeyEncoding",
    "CodecSpec",
    "GroupSpec",
    "Order",
    "normalize_node_path",
    "parse_v2",
    "parse_v3",
    "read_array_spec",
    "read_node",
]
