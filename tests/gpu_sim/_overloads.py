"""pybind11-style overloads for the simulator: the same parameter lists the real module declares."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["overloaded"]


def overloaded(
    *params: str, method: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a method's overloads by their parameter lists, as pybind11 documents them.

    Each string is a Python parameter list (``"src, data_type='', out=None"``). A call binds
    to the first overload its arguments fit; the implementation gets the overload's index and
    the bound arguments by position. Arguments that fit no overload raise ``TypeError`` as
    pybind11's "incompatible function arguments" does.
    """
    sigs = [inspect.signature(eval(f"lambda {p}: None")) for p in params]

    def wrap(impl: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(impl)
        def call(*args: Any, **kwargs: Any) -> Any:
            head: tuple[Any, ...] = ()
            if method:
                head, args = args[:1], args[1:]
            for i, sig in enumerate(sigs):
                try:
                    bound = sig.bind(*args, **kwargs)
                except TypeError:
                    continue
                bound.apply_defaults()
                return impl(*head, i, *bound.args)
            raise TypeError(
                f"{impl.__name__}(): incompatible function arguments. The following argument "
                f"types are supported: {'; '.join(params)}. Invoked with args={args!r}, "
                f"kwargs={sorted(kwargs)}"
            )

        call.__signatures__ = sigs  # type: ignore[attr-defined]
        return call

    return wrap
