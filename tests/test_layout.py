"""The shape of the code: no import cycles, small modules and classes, no store probing.

Checked from the source, so a change that breaks a rule fails CI:

- no import cycle among cuzarr's modules, function-local imports included (imports under
  ``if TYPE_CHECKING:`` do not run and are left out). An import of ``a.b.c`` counts as an import
  of module ``a.b.c``, as import-linter counts it;
- no module over 600 lines, no class over 400 lines;
- the engine, the shard reader and the locks find out what a store can do from its declared
  capabilities (``store.caps``), never by probing it with ``getattr``/``hasattr``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "cuzarr"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
NO_PROBING = ("cuzarr/engine", "cuzarr/codecs/sharding", "cuzarr/stores/ranges.py")


def _modules() -> dict[str, tuple[Path, bool]]:
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(module: str, path: Path, is_package: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for name in names:
            while name not in MODULES and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in MODULES and name != module and name.split(".")[0] == PACKAGE:
                found.add(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    graph = {m: _imports(m, p, pkg) for m, (p, pkg) in MODULES.items()}
    assert graph["cuzarr.engine.read"], "the import graph was not read"
    assert _cycles(graph) == []


def test_the_cycle_check_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_classes_are_small(module: str) -> None:
    path, _ = MODULES[module]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path} has {text.count(chr(10))} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            assert n <= MAX_CLASS_LINES, f"class {node.name} of {path} has {n} lines"


def test_no_capability_probing_of_stores() -> None:
    offenders: list[str] = []
    checked = 0
    for module, (path, _) in MODULES.items():
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith(NO_PROBING):
            continue
        checked += 1
        offenders.extend(
            f"{rel}:{node.lineno} ({module})"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and not (isinstance(node.args[0], ast.Name) and node.args[0].id == "os")
        )
    assert checked >= 8, "the engine and shard modules were not found"
    assert offenders == []
