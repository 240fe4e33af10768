"""Run callables on threads at once and report what went wrong in any of them (for tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def run_threads(
    targets: Sequence[Callable[[], object]], *, timeout: float = 120.0, barrier: bool = True
) -> None:
    """Run every target on its own thread and wait for all of them.

    Parameters
    ----------
    targets : sequence of callables
        One thread each.
    timeout : float
        Seconds to wait for each thread; a thread still running after it fails the test.
    barrier : bool
        Start the targets together (a ``threading.Barrier``), so that they overlap.

    Raises
    ------
    BaseException
        The first error any target raised (the others are attached as its notes).
    AssertionError
        A thread did not finish in time.
    """
    errors: list[BaseException] = []
    gate = threading.Barrier(len(targets)) if barrier else None

    def run(target: Callable[[], object]) -> None:
        try:
            if gate is not None:
                gate.wait()
            target()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"a thread hung (> {timeout} s)"
    if errors:
        for other in errors[1:]:
            errors[0].add_note(f"another thread raised {type(other).__name__}: {other}")
        raise errors[0]
