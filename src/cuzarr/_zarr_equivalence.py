"""The equivalence rule: when cuzarr may stand in for zarr-python's own store and codec code.

cuzarr replaces code of zarr's: its direct store paths read and write the files, the dict or
obstore themselves instead of calling the store's methods, and its engine decodes instead of
zarr's codec classes. That is equivalent only while the replaced code is zarr's own: a
subclass that overrides a method, a wrapper, a mock, a method patched on zarr's class, or a
codec class registered in place of zarr's all change what zarr would do, so cuzarr then goes
through the store's API (stores) or falls back to zarr's pipeline (codecs). See
docs/reliability.md, section 4. Tested against zarr 3.4.x, as :mod:`cuzarr._zarr_compat`.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

__all__ = [
    "behaves_as",
    "foreign_codec",
    "gds_store_root",
    "is_memory_store",
    "is_object_store",
    "local_store_root",
    "obstore_of",
]


#: Top-level packages whose classes and functions cuzarr knows the behaviour of.
_KNOWN_PACKAGES = frozenset({"zarr", "numcodecs", "cuzarr"})
#: Modules of base classes that carry no data behaviour of their own.
_NEUTRAL_MODULES = frozenset({"builtins", "abc", "typing", "dataclasses", "enum", "functools"})
_TRUSTED = _KNOWN_PACKAGES | _NEUTRAL_MODULES | {"collections"}

#: The store methods that cuzarr's direct store paths stand in for.
STORE_DATA_METHODS = (
    "get",
    "get_partial_values",
    "get_ranges",
    "get_sync",
    "get_ranges_sync",
    "exists",
    "set",
    "set_sync",
    "set_if_not_exists",
    "_set_many",
    "delete",
    "delete_sync",
    "_check_writable",
)


def _package(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return ""
    if module.startswith("namedtuple_"):
        return "collections"  # the methods collections.namedtuple generates
    return module.partition(".")[0]


def _function_of(attr: Any) -> Any:
    """The function behind a class attribute (method, static/class method, property getter)."""
    if isinstance(attr, (staticmethod, classmethod)):
        return attr.__func__
    if isinstance(attr, property):
        return attr.fget
    return attr


def foreign_code(cls: type) -> str | None:
    """Name code in ``cls`` that is not zarr's, numcodecs' or cuzarr's own, else ``None``.

    Every class in the MRO must come from those packages (or be a neutral base such as
    ``object``), and every function in their namespaces must be defined there: a method
    patched onto zarr's class (``monkeypatch.setattr``, a mock) is found by its module.
    """
    for klass in cls.__mro__:
        module = klass.__module__
        if module in _NEUTRAL_MODULES or module.startswith("collections"):
            continue
        if _package(klass) not in _KNOWN_PACKAGES:
            return f"class {module}.{klass.__qualname__}"
        found = _foreign_attribute(klass)
        if found is not None:
            return found
    return None


#: Per class: the namespace values last checked and the verdict. Equal values (compared
#: element by element, identity first) give the same verdict, so a patch is seen at once.
_CHECKED: dict[type, tuple[tuple[Any, ...], str | None]] = {}


def _foreign_attribute(klass: type) -> str | None:
    namespace = vars(klass)
    values = tuple(namespace.values())
    hit = _CHECKED.get(klass)
    if hit is not None:
        try:
            if hit[0] == values:
                return hit[1]
        except Exception:  # an attribute without boolean equality: check it again
            pass
    found = None
    for name, attr in namespace.items():
        fn = _function_of(attr)
        if callable(fn) and not isinstance(fn, type) and _package(fn) not in _TRUSTED:
            found = f"{klass.__qualname__}.{name} (replaced by {_package(fn) or '?'} code)"
            break
    _CHECKED[klass] = (values, found)
    return found


def _data_methods(kind: type) -> tuple[Any, ...]:
    """What :data:`STORE_DATA_METHODS` are on class ``kind`` (``None`` where one is missing)."""
    try:
        return _DATA_METHODS(kind)
    except AttributeError:
        return tuple(getattr(kind, name, None) for name in STORE_DATA_METHODS)


_DATA_METHODS = operator.attrgetter(*STORE_DATA_METHODS)

#: Per (store class, zarr class): the data methods of both when last checked and the
#: verdict. The same methods (compared element by element, identity first) give the same
#: verdict, so a method patched on either class is seen at once; per call this is one
#: attribute fetch per method instead of the check (~5 us warm, ~15 us inside a zarr call).
_VERDICTS: dict[tuple[type, type], tuple[tuple[Any, ...], tuple[Any, ...], bool]] = {}


def behaves_as(store: Any, cls: type) -> bool:
    """Whether ``store`` does exactly what zarr's store class ``cls`` does with data.

    True for an instance of ``cls``, or of a subclass that overrides none of
    :data:`STORE_DATA_METHODS`, with no per-instance override either, while ``cls``'s own
    methods are zarr's (not patched). Wrappers and mocks are other classes: false.
    """
    if not _plain_instance(store, cls):
        return False
    kind = type(store)
    methods = _data_methods(kind)
    zarrs = methods if kind is cls else _data_methods(cls)
    hit = _VERDICTS.get((kind, cls))
    if hit is not None:
        try:
            if hit[0] == methods and hit[1] == zarrs:
                return hit[2]
        except Exception:  # a method object without boolean equality: check again
            pass
    # No data method replaced by the subclass, and zarr's class's own are zarr's (unpatched).
    verdict = all(m is z for m, z in zip(methods, zarrs, strict=True)) and all(
        fn is None or _package(fn) == "zarr" for fn in zarrs
    )
    _VERDICTS[(kind, cls)] = (methods, zarrs, verdict)
    return verdict


def _plain_instance(store: Any, cls: type) -> bool:
    """Whether ``store`` is a ``cls`` with no data method replaced on the instance itself."""
    if not isinstance(store, cls):
        return False
    own = getattr(store, "__dict__", None)
    return not (own and not own.keys().isdisjoint(STORE_DATA_METHODS))


def _unchanged_instance(store: Any, cls: type) -> bool:
    """Whether ``store`` is a ``cls`` whose class and instance replace none of its data methods."""
    kind = type(store)
    return _plain_instance(store, cls) and all(
        getattr(kind, name, None) is getattr(cls, name, None) for name in STORE_DATA_METHODS
    )


def local_store_root(store: Any) -> Any:
    """The root folder of a store that behaves exactly as zarr's ``LocalStore``, else ``None``."""
    from zarr.storage import LocalStore

    return store.root if behaves_as(store, LocalStore) else None


#: The data methods kvikio's ``GDSStore`` (kvikio 26.10) defines over zarr's ``LocalStore``.
GDS_STORE_OWN_METHODS = frozenset({"get", "set"})


def gds_store_root(store: Any) -> Any:
    """The root folder of kvikio's ``GDSStore`` whose reads are kvikio's own, else ``None``.

    ``kvikio.zarr.GDSStore`` is zarr's ``LocalStore`` with ``get``/``set`` by kvikio file I/O.
    Its ``get`` reads exactly the bytes ``LocalStore.get`` reads, from the same file
    ``root / key``; only where they land differs (the caller's prototype: GPU memory under
    ``zarr.config.enable_gpu()``). Reading the folder directly (cuzarr's local and kvikio
    device reads) returns the same. Its ``set`` rewrites files in place where cuzarr replaces
    them atomically, so writes stay on the store's API (:func:`cuzarr.stores.from_zarr_store`).

    Never imports kvikio. As :func:`behaves_as`: no subclass or instance override of a data
    method; ``GDSStore``'s own exactly :data:`GDS_STORE_OWN_METHODS`, the rest zarr's.
    """
    from zarr.storage import LocalStore

    module = sys.modules.get("kvikio.zarr")
    gds = None if module is None else vars(module).get("GDSStore")
    if not (isinstance(gds, type) and issubclass(gds, LocalStore)):
        return None
    if not _unchanged_instance(store, gds):
        return None
    for name in STORE_DATA_METHODS:
        own = vars(gds).get(name)
        if own is not None:
            where = getattr(_function_of(own), "__module__", None)
            if name not in GDS_STORE_OWN_METHODS or where != gds.__module__:
                return None
        elif (fn := getattr(gds, name, None)) is not getattr(LocalStore, name, None) or (
            fn and _package(fn) != "zarr"
        ):
            return None
    return store.root


def is_memory_store(store: Any) -> bool:
    """Whether ``store`` behaves exactly as zarr's ``MemoryStore`` (its dict may be used)."""
    from zarr.storage import MemoryStore

    return behaves_as(store, MemoryStore)


def is_object_store(store: Any) -> bool:
    """Whether ``store`` is a zarr ``ObjectStore`` (obstore underneath), wrapped or not."""
    from zarr.storage import ObjectStore, WrapperStore

    while isinstance(store, WrapperStore):
        store = store._store
    return isinstance(store, ObjectStore)


def obstore_of(store: Any) -> Any:
    """The obstore store inside a store that behaves exactly as zarr's ``ObjectStore``."""
    try:
        from zarr.storage import ObjectStore
    except ImportError:  # pragma: no cover - zarr always has it
        return None
    return store.store if behaves_as(store, ObjectStore) else None


def foreign_codec(metadata: Any) -> str | None:
    """Name a codec of the array whose implementation is not zarr's (numcodecs') own.

    cuzarr's engine decodes in place of zarr's codec classes; a class registered in place of
    zarr's, or a method patched onto one, means zarr would do something else. Sharded arrays
    also need zarr's shard index and reader classes unchanged.
    """
    from zarr.codecs.sharding import ShardingCodec, _ShardIndex, _ShardReader
    from zarr.core.metadata import ArrayV2Metadata

    if isinstance(metadata, ArrayV2Metadata):
        codecs: list[Any] = [c for c in (*(metadata.filters or ()), metadata.compressor) if c]
    else:
        codecs = list(getattr(metadata, "codecs", ()))
    seen: set[type] = set()
    while codecs:
        codec = codecs.pop()
        kind = type(codec)
        if kind in seen:
            continue
        seen.add(kind)
        found = foreign_code(kind)
        if found is not None:
            return f"codec {getattr(codec, 'codec_id', kind.__name__)!s}: {found}"
        if isinstance(codec, ShardingCodec):
            codecs.extend((*codec.codecs, *codec.index_codecs))
            for helper in (_ShardIndex, _ShardReader):
                if helper not in seen:
                    seen.add(helper)
                    found = foreign_code(helper)
                    if found is not None:
                        return f"zarr's sharding: {found}"
    return None
