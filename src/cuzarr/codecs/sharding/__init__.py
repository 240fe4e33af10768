"""The ``sharding_indexed`` codec: the shard format, its index cache, and reading shards.

- :mod:`~cuzarr.codecs.sharding.format`: the layout (index location, decoding and validation,
  inner-chunk bytes, assembly);
- :mod:`~cuzarr.codecs.sharding.cache`: decoded shard indexes, kept per version;
- :mod:`~cuzarr.codecs.sharding.reader`: how the inner chunks of a shard are read from a store.
"""

from __future__ import annotations

from cuzarr.codecs.sharding.format import EMPTY, ShardingCodec, morton_order

__all__ = ["EMPTY", "ShardingCodec", "morton_order"]
