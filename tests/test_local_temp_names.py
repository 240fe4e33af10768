"""Temporary files of local writes: unique names without a system call per name."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from cuzarr.stores import replace
from cuzarr.stores.local import TEMP_SUFFIX, LocalChunkStore


def _child_name(path: str) -> str:
    return replace.temp_names.next(path)


def test_names_are_unique_per_call_and_per_process(tmp_path: Path) -> None:
    path = str(tmp_path / "c" / "0")
    names = {replace.temp_names.next(path) for _ in range(1000)}
    assert len(names) == 1000
    assert all(n.startswith(path + ".") and n.endswith(TEMP_SUFFIX) for n in names)
    mine = next(iter(names))
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        theirs = pool.apply(_child_name, (path,))

    def token(name: str) -> list[str]:  # "<pid>-<random>-<counter>" between path and suffix
        return name[len(path) + 1 : -len(TEMP_SUFFIX)].split("-")[:2]

    # A forked child draws its own token: its names cannot collide with the parent's.
    assert token(theirs) != token(mine)
    assert token(mine)[0] == f"{os.getpid():x}"


class _Clashing:
    """Hands out a name that already exists first (a leftover), then fresh ones."""

    def __init__(self, first: str) -> None:
        self.first: str | None = first

    def next(self, path: str) -> str:
        name, self.first = self.first, None
        return name if name is not None else f"{path}.fresh{TEMP_SUFFIX}"


def test_a_leftover_with_the_same_name_does_not_fail_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalChunkStore(tmp_path)
    (tmp_path / "c").mkdir()
    leftover = tmp_path / "c" / f"0.old{TEMP_SUFFIX}"
    leftover.write_bytes(b"leftover")
    monkeypatch.setattr(replace, "temp_names", _Clashing(str(leftover)))
    store.put("c/0", b"new chunk")
    assert (tmp_path / "c" / "0").read_bytes() == b"new chunk"
    assert leftover.read_bytes() == b"leftover"  # not ours: left alone
    assert not (tmp_path / "c" / f"0.fresh{TEMP_SUFFIX}").exists()  # renamed over the key
