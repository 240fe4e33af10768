"""A stand-in for ``cupy`` (CuPy 14): device arrays on NumPy, strict about host/device mixing.

``ndarray`` holds its "device memory" in a private NumPy array. Like CuPy it refuses implicit
conversion to NumPy (``__array__`` raises ``TypeError``; no buffer protocol; NumPy arrays are
not accepted as operands), accepts host data where CuPy does (``asarray``, ``array``,
``__setitem__`` values, ``set``), and returns 0-d device arrays where NumPy returns scalars.
Copies between host and device, and every implicit synchronization (``bool``/``int``/
``float`` of a device scalar, ``get``), are recorded in :mod:`._events`.
"""

from __future__ import annotations

import bisect
import re
import types
import weakref
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any

import numpy as np

from . import _kernels
from ._events import record

_IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. "
    "Please use `.get()` to construct a NumPy array explicitly."
)


#: Live device allocations (the NumPy arrays that own device memory here), by start address:
#: (end address, weak reference). nvCOMP's C API (``_libnvcomp``) takes raw device addresses;
#: :func:`device_bytes` checks each against this table, as the device would fault.
_ALLOCATIONS: dict[int, tuple[int, weakref.ref[np.ndarray]]] = {}


def _register(arr: np.ndarray) -> None:
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.nbytes == 0 or not root.flags.c_contiguous:
        return
    start = int(root.__array_interface__["data"][0])
    known = _ALLOCATIONS.get(start)
    if known is not None and known[1]() is root:
        return

    def forget(ref: weakref.ref[np.ndarray], start: int = start) -> None:
        if _ALLOCATIONS.get(start, (0, None))[1] is ref:
            del _ALLOCATIONS[start]

    _ALLOCATIONS[start] = (start + root.nbytes, weakref.ref(root, forget))


class DeviceMemory:
    """A snapshot of the live device allocations, to resolve raw addresses against."""

    def __init__(self) -> None:
        items = sorted((s, e, r) for s, (e, r) in list(_ALLOCATIONS.items()))
        self._starts = [s for s, _, _ in items]
        self._items = items

    def bytes_at(self, address: int, nbytes: int, what: str) -> np.ndarray:
        """The ``nbytes`` of device memory at ``address`` as a uint8 view (bounds checked)."""
        if not isinstance(address, int) or not isinstance(nbytes, int) or nbytes < 0:
            raise TypeError(f"{what}: expected an int address and size")
        k = bisect.bisect_right(self._starts, address) - 1
        if k >= 0:
            start, end, ref = self._items[k]
            root = ref()
            if root is not None and address + nbytes <= end:
                flat = root.reshape(-1).view(np.uint8)
                return flat[address - start : address - start + nbytes]
        raise ValueError(
            f"{what}: [{address:#x}, +{nbytes}) is not inside one live device allocation"
            " (an illegal address on a GPU)"
        )


def _is_pinned(arr: np.ndarray) -> bool:
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, PinnedMemoryPointer)


def _unwrap_index(key: Any) -> Any:
    if isinstance(key, ndarray):
        return key._a
    if isinstance(key, tuple):
        return tuple(_unwrap_index(k) for k in key)
    return key


def _operand(x: Any) -> Any:
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return x
    raise TypeError(f"Unsupported type {type(x)}")


def _unwrap_all(obj: Any) -> Any:
    if isinstance(obj, ndarray):
        return obj._a
    if isinstance(obj, np.ndarray) and obj.ndim:
        raise TypeError(f"Unsupported type {type(obj)}")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap_all(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _unwrap_all(v) for k, v in obj.items()}
    return obj


def _rewrap(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):
        return _wrap(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rewrap(x) for x in obj)
    return obj


def _wrap(value: Any) -> ndarray:
    if isinstance(value, np.ndarray):
        return ndarray._from(value)
    return ndarray._from(np.asarray(value))


class MemoryPointer:
    """``ndarray.data``: the address of the first element."""

    def __init__(self, arr: np.ndarray) -> None:
        self.ptr = int(arr.__array_interface__["data"][0])
        self.mem = arr


class Flags:
    """``ndarray.flags`` as CuPy has it: contiguity and ownership, no ``writeable``."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, arr: np.ndarray) -> None:
        self.c_contiguous = bool(arr.flags.c_contiguous)
        self.f_contiguous = bool(arr.flags.f_contiguous)
        self.owndata = bool(arr.flags.owndata)


class ndarray:
    """A device array (its memory is a private NumPy array)."""

    __array_priority__ = 100

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # As CuPy: NumPy ufuncs on device arrays run on the device; host arrays are refused.
        if method != "__call__" or "out" in kwargs:
            return NotImplemented
        return _wrap(ufunc(*[_operand(x) for x in inputs], **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # As CuPy: NumPy functions dispatch to the module's function of the same name; the
        # rest of NumPy's API runs on the device memory (CuPy implements nearly all of it).
        # Host arrays among the arguments are refused, as CuPy refuses them.
        impl = _FUNCTIONS.get(func.__name__)
        if impl is not None:
            return impl(*args, **kwargs)
        return _rewrap(func(*_unwrap_all(args), **_unwrap_all(kwargs)))

    def __init__(
        self,
        shape: Any,
        dtype: Any = float,
        memptr: Any = None,
        strides: Any = None,
        order: str = "C",
    ) -> None:
        self._a = np.empty(shape, dtype, order=order)  # type: ignore[call-overload]
        _register(self._a)

    @classmethod
    def _from(cls, arr: np.ndarray) -> ndarray:
        obj = cls.__new__(cls)
        obj._a = arr
        _register(arr)
        return obj

    # ------------------------------------------------------------ strictness
    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(_IMPLICIT)

    def __bytes__(self) -> bytes:
        raise TypeError(_IMPLICIT)

    def __iter__(self) -> Any:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # ------------------------------------------------------------ attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: Flags(self._a))
    T = property(lambda self: ndarray._from(self._a.T))
    data = property(lambda self: MemoryPointer(self._a))

    @property
    def base(self) -> ndarray | None:
        return None if self._a.base is None else ndarray._from(self._a.base)  # type: ignore[arg-type]

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self._a.shape,
            "typestr": self._a.dtype.str,
            "data": (int(self._a.__array_interface__["data"][0]), self._a.flags.writeable is False),
            "strides": None if self._a.flags.c_contiguous else self._a.strides,
            "version": 3,
        }

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return f"sim_cupy.ndarray({self._a!r})"

    # ------------------------------------------------------------ device -> host
    def get(
        self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True
    ) -> np.ndarray:
        record("d2h", nbytes=self.nbytes, pinned=out is not None and _is_pinned(out))
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be used as out")
            out[...] = self._a
            return out
        return np.array(self._a, order=order)  # type: ignore[call-overload]

    def set(self, arr: Any, stream: Any = None) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, not {type(arr)}")
        if arr.size != self.size:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        record("h2d", nbytes=arr.nbytes, pinned=_is_pinned(arr))
        self._a[...] = arr.reshape(self.shape)

    def _scalar(self) -> Any:
        if self.size != 1:
            raise ValueError("only size-1 arrays can be converted to Python scalars")
        record("sync", "scalar")
        return self._a.reshape(-1)[0]

    def __bool__(self) -> bool:
        return bool(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self._scalar())

    def __float__(self) -> float:
        return float(self._scalar())

    def item(self) -> Any:
        return self._scalar().item()

    def tolist(self) -> Any:
        record("d2h", nbytes=self.nbytes, pinned=False)
        return self._a.tolist()

    # ------------------------------------------------------------ indexing
    def __getitem__(self, key: Any) -> ndarray:
        return _wrap(self._a[_unwrap_index(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, ndarray):
            value = value._a
        elif isinstance(value, np.ndarray):
            record("h2d", nbytes=value.nbytes, pinned=_is_pinned(value))
        self._a[_unwrap_index(key)] = value

    # ------------------------------------------------------------ methods
    def view(self, dtype: Any = None) -> ndarray:
        return ndarray._from(self._a.view(dtype))

    def reshape(self, *shape: Any, order: str = "C") -> ndarray:
        return ndarray._from(self._a.reshape(*shape, order=order))  # type: ignore[call-overload]

    def transpose(self, *axes: Any) -> ndarray:
        return ndarray._from(self._a.transpose(*axes))

    def ravel(self, order: str = "C") -> ndarray:
        return ndarray._from(self._a.ravel(order))  # type: ignore[arg-type]

    def copy(self, order: str = "C") -> ndarray:
        return ndarray._from(self._a.copy(order))  # type: ignore[arg-type]

    def astype(
        self,
        dtype: Any,
        order: str = "K",
        casting: Any = None,
        subok: Any = None,
        copy: bool = True,
    ) -> ndarray:
        return ndarray._from(self._a.astype(dtype, order=order, copy=copy))  # type: ignore[call-overload]

    def fill(self, value: Any) -> None:
        self._a.fill(_operand(value))

    def all(self, axis: Any = None, keepdims: bool = False) -> ndarray:
        return _wrap(self._a.all(axis=axis, keepdims=keepdims))

    def any(self, axis: Any = None, keepdims: bool = False) -> ndarray:
        return _wrap(self._a.any(axis=axis, keepdims=keepdims))

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ndarray:
        return _wrap(self._a.sum(axis=axis, dtype=dtype, keepdims=keepdims))

    def nonzero(self) -> tuple[ndarray, ...]:
        return tuple(_wrap(i) for i in self._a.nonzero())

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("the device simulator does not export DLPack")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA, device 0


def _binary(op: str) -> Any:
    def method(self: ndarray, other: Any) -> Any:
        return _wrap(getattr(self._a, op)(_operand(other)))

    method.__name__ = op
    return method


for _op in (
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__floordiv__",
    "__mod__",
    "__and__",
    "__or__",
    "__xor__",
    "__lshift__",
    "__rshift__",
    "__rand__",
    "__ror__",
):
    setattr(ndarray, _op, _binary(_op))
ndarray.__hash__ = None  # type: ignore[assignment]
ndarray.__invert__ = lambda self: _wrap(~self._a)  # type: ignore[attr-defined]
ndarray.__neg__ = lambda self: _wrap(-self._a)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- creation


def _host_to_device(obj: Any, dtype: Any, copy: bool | None, order: Any) -> ndarray:
    if isinstance(obj, ndarray):
        a = obj._a
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return ndarray._from(a.astype(dtype, order=order or "K"))
        return ndarray._from(a.copy(order or "K")) if copy else obj
    if hasattr(obj, "__cuda_array_interface__"):
        dev = getattr(obj, "_sim_device", None)
        if dev is None:
            raise TypeError(f"{type(obj).__name__}: not memory of this (simulated) device")
        view = ndarray._from(dev() if callable(dev) else dev)
        view._keep = obj  # CuPy keeps the exporter alive (UnownedMemory's owner)
        return _host_to_device(view, dtype, copy, order)
    if isinstance(obj, (list, tuple)) and any(isinstance(x, ndarray) for x in obj):
        raise TypeError("lists of device arrays: use cupy.stack")
    host = np.asarray(obj, dtype=dtype, order=order)
    record("h2d", nbytes=host.nbytes, pinned=_is_pinned(host))
    return ndarray._from(np.array(host, copy=True))


def asarray(
    a: Any,
    dtype: Any = None,
    order: Any = None,
    *,
    copy: bool | None = None,
    blocking: bool = False,
) -> ndarray:
    return _host_to_device(a, dtype, copy, order)


def array(
    obj: Any,
    dtype: Any = None,
    copy: bool = True,
    order: str = "K",
    subok: bool = False,
    ndmin: int = 0,
    blocking: bool = False,
) -> ndarray:
    out = _host_to_device(obj, dtype, True if copy else None, order)
    if isinstance(obj, ndarray) and copy and out._a is obj._a:
        out = ndarray._from(out._a.copy())
    return out


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> ndarray:
    return _host_to_device(a, dtype, None, order)


def frombuffer(buffer: Any, dtype: Any = float, count: int = -1, offset: int = 0) -> ndarray:
    return _host_to_device(np.frombuffer(buffer, dtype, count, offset), None, None, None)


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    if not isinstance(a, ndarray):
        return asarray(a, dtype=dtype, order="C")
    return ndarray._from(np.ascontiguousarray(a._a, dtype=dtype))


def asnumpy(
    a: Any, stream: Any = None, order: str = "C", out: Any = None, *, blocking: bool = True
) -> np.ndarray:
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)  # type: ignore[call-overload]


def empty(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray._from(np.empty(shape, dtype, order=order))  # type: ignore[call-overload]


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray._from(np.zeros(shape, dtype, order=order))  # type: ignore[call-overload]


def ones(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray._from(np.ones(shape, dtype, order=order))  # type: ignore[call-overload]


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> ndarray:
    return ndarray._from(np.full(shape, _operand(fill_value), dtype, order=order))  # type: ignore[call-overload]


def _like(name: str) -> Any:
    def fn(
        a: ndarray, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None
    ) -> ndarray:
        if not isinstance(a, ndarray):
            raise TypeError(f"{name}: expected a cupy.ndarray, got {type(a).__name__}")
        return ndarray._from(getattr(np, name)(a._a, dtype=dtype, order=order, shape=shape))

    fn.__name__ = name
    return fn


empty_like = _like("empty_like")
zeros_like = _like("zeros_like")


def arange(*args: Any, dtype: Any = None) -> ndarray:
    return ndarray._from(np.arange(*args, dtype=dtype))


def _dev(a: Any, what: str) -> np.ndarray:
    if not isinstance(a, ndarray):
        raise TypeError(f"{what}: expected a cupy.ndarray, got {type(a).__name__}")
    return a._a


def isnan(x: Any) -> ndarray:
    return _wrap(np.isnan(_dev(x, "isnan")))


def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return bool(np.shares_memory(_dev(a, "shares_memory"), _dev(b, "shares_memory")))


def may_share_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return bool(np.may_share_memory(_dev(a, "may_share_memory"), _dev(b, "may_share_memory")))


def broadcast_to(array: Any, shape: Any) -> ndarray:
    return ndarray._from(np.broadcast_to(_dev(array, "broadcast_to"), shape))


def broadcast_arrays(*args: Any) -> list[ndarray]:
    devs = [a if isinstance(a, ndarray) else asarray(a) for a in args]
    return [ndarray._from(x) for x in np.broadcast_arrays(*[d._a for d in devs])]


def take(a: Any, indices: Any, axis: Any = None, out: Any = None) -> ndarray:
    return _rewrap(np.take(_dev(a, "take"), _unwrap_index(indices), axis=axis))


def tensordot(a: Any, b: Any, axes: Any = 2) -> ndarray:
    return _rewrap(np.tensordot(_dev(a, "tensordot"), _dev(b, "tensordot"), axes))


def einsum(*operands: Any, **kwargs: Any) -> ndarray:
    return _rewrap(np.einsum(*_unwrap_all(operands), **kwargs))


def concatenate(arrays: Sequence[Any], axis: int = 0) -> ndarray:
    return ndarray._from(np.concatenate([_dev(a, "concatenate") for a in arrays], axis=axis))


def stack(arrays: Sequence[Any], axis: int = 0) -> ndarray:
    return ndarray._from(np.stack([_dev(a, "stack") for a in arrays], axis=axis))


def array_equal(a: Any, b: Any, equal_nan: bool = False) -> ndarray:
    return _wrap(
        np.array_equal(_dev(a, "array_equal"), _dev(b, "array_equal"), equal_nan=equal_nan)
    )


def get_array_module(*args: Any) -> types.ModuleType:
    return module if any(isinstance(a, ndarray) for a in args) else np  # type: ignore[return-value]


# ---------------------------------------------------------------------- cuda


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory (a bytearray here); ``np.frombuffer`` views it."""

    @property
    def ptr(self) -> int:
        return int(np.frombuffer(self, np.uint8).__array_interface__["data"][0])

    @property
    def size(self) -> int:
        return len(self)


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    if not isinstance(size, int) or size < 0:
        raise TypeError(f"size must be a non-negative int, got {size!r}")
    record("alloc_pinned", nbytes=size)
    return PinnedMemoryPointer(size)


class Stream:
    """A CUDA stream; ``synchronize`` is recorded."""

    _next = 0x1000

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        Stream._next += 0x10
        self.ptr = 0 if null else Stream._next

    def synchronize(self) -> None:
        record("sync", "stream", ptr=self.ptr)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_null_stream = Stream(null=True)


def get_current_stream(device_id: int = -1) -> Stream:
    return _null_stream


class Device:
    def __init__(self, device: int = 0) -> None:
        if device != 0:
            raise ValueError(f"device {device}: the simulator has one device (0)")
        self.id = device

    def synchronize(self) -> None:
        record("sync", "device")

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class CUDARuntimeError(RuntimeError):
    pass


def _getDeviceCount() -> int:
    return 1


def _memGetInfo() -> tuple[int, int]:
    return (64 << 30, 80 << 30)


def _runtimeGetVersion() -> int:
    return 13000


def _driverGetVersion() -> int:
    return 13000


def _getDeviceProperties(device: int) -> dict[str, Any]:
    return {
        "name": b"cuzarr device simulator",
        "totalGlobalMem": 80 << 30,
        "major": 9,
        "minor": 0,
        "multiProcessorCount": 132,
    }


# ---------------------------------------------------------------------- kernels


class RawKernel:
    """A kernel of a :class:`RawModule` (checked against its C signature on every launch)."""

    def __init__(self, name: str, params: list[_kernels.Param]) -> None:
        self.name = name
        self.params = params

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0) -> None:
        _kernels.launch(self.name, self.params, grid, block, args, shared_mem, device_type=ndarray)


class RawModule:
    """CUDA source compiled on use; ``get_function`` finds ``extern "C" __global__`` kernels."""

    def __init__(
        self,
        *,
        code: str | None = None,
        path: str | None = None,
        options: tuple[str, ...] = (),
        backend: str = "nvrtc",
        translate_cucomplex: bool = False,
        enable_cooperative_groups: bool = False,
        name_expressions: Any = None,
        jitify: bool = False,
    ) -> None:
        if code is None:
            raise ValueError("the simulator compiles source code only (code=...)")
        if not isinstance(options, tuple):
            raise TypeError(f"options must be a tuple of str, got {type(options).__name__}")
        for opt in options:
            if not isinstance(opt, str) or not re.fullmatch(r"-{1,2}[\w.=+\-]+", opt):
                raise ValueError(f"bad NVRTC option {opt!r}")
        self.code = code
        self._kernels = _kernels.parse(code)

    def get_function(self, name: str) -> RawKernel:
        if name not in self._kernels:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        return RawKernel(name, self._kernels[name])


# ---------------------------------------------------------------------- the modules


def _make_module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    return mod


_FUNCTIONS: dict[str, Any] = {}

runtime = _make_module(
    "cupy.cuda.runtime",
    getDeviceCount=_getDeviceCount,
    memGetInfo=_memGetInfo,
    runtimeGetVersion=_runtimeGetVersion,
    driverGetVersion=_driverGetVersion,
    getDeviceProperties=_getDeviceProperties,
    CUDARuntimeError=CUDARuntimeError,
)
cuda = _make_module(
    "cupy.cuda",
    runtime=runtime,
    Stream=Stream,
    Device=Device,
    get_current_stream=get_current_stream,
    alloc_pinned_memory=alloc_pinned_memory,
    PinnedMemoryPointer=PinnedMemoryPointer,
    MemoryPointer=MemoryPointer,
)
module = _make_module(
    "cupy",
    __version__="14.2.0+sim",
    ndarray=ndarray,
    cuda=cuda,
    RawModule=RawModule,
    RawKernel=RawKernel,
    asarray=asarray,
    asanyarray=asanyarray,
    frombuffer=frombuffer,
    array=array,
    ascontiguousarray=ascontiguousarray,
    asnumpy=asnumpy,
    empty=empty,
    zeros=zeros,
    ones=ones,
    full=full,
    empty_like=empty_like,
    zeros_like=zeros_like,
    arange=arange,
    isnan=isnan,
    shares_memory=shares_memory,
    may_share_memory=may_share_memory,
    broadcast_to=broadcast_to,
    broadcast_arrays=broadcast_arrays,
    take=take,
    tensordot=tensordot,
    einsum=einsum,
    concatenate=concatenate,
    stack=stack,
    array_equal=array_equal,
    get_array_module=get_array_module,
    **{
        t: getattr(np, t)
        for t in (
            "bool_",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "float16",
            "float32",
            "float64",
            "complex64",
            "complex128",
            "dtype",
            "nan",
        )
    },
)

_FUNCTIONS.update(
    {k: v for k, v in module.__dict__.items() if callable(v) and not isinstance(v, type)}
)
