"""The call signatures the real ``nvidia.nvcomp``, ``kvikio`` and ``cupy`` declare.

Run with the real modules importable (they import without a GPU)::

    python tests/gpu_sim/api_facts.py > tests/gpu_sim/api_facts.json

``make gpu-api-facts`` installs the pinned wheels into ``.gpu-api/`` and does that. The JSON
maps each callable to its overloads, each a list of ``[name, kind, has_default]`` parameters
(pybind11 overloads are read from the docstring, Python functions through ``inspect``), plus
the public attributes of the classes, the members of the enums the simulator stands in for,
and the bases and own methods of ``kvikio.zarr.GDSStore`` (which needs zarr installed).
``tests/test_gpu_sim_api.py`` checks the simulator against this file (in every CI run) and
this file against the real modules (where they are installed).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

#: Callables whose signatures the simulator must accept exactly: "module:qualname".
CALLABLES = [
    "nvidia.nvcomp:Codec.decode",
    "nvidia.nvcomp:Codec.encode",
    "nvidia.nvcomp:Codec.compression_config",
    "nvidia.nvcomp:Codec.decompression_config",
    "nvidia.nvcomp:Codec.get_required_decompression_alignment",
    "nvidia.nvcomp:Codec.get_max_comp_buffer_size",
    "nvidia.nvcomp:Codec.get_uncomp_buffer_size",
    "nvidia.nvcomp:as_array",
    "nvidia.nvcomp:as_arrays",
    "nvidia.nvcomp:Array.cpu",
    "nvidia.nvcomp:Array.cuda",
    "nvidia.nvcomp:BatchArray.cpu",
    "nvidia.nvcomp:BatchArray.cuda",
    "kvikio:CuFile.__init__",
    "kvikio:CuFile.pread",
    "kvikio:CuFile.read",
    "kvikio:CuFile.close",
    "kvikio:CuFile.write",
    "kvikio:CuFile.pwrite",
    "kvikio.zarr:GDSStore.__init__",
    "kvikio.zarr:GDSStore.get",
    "kvikio.zarr:GDSStore.set",
    "kvikio.zarr:GDSStore._set",
    "cupy:asarray",
    "cupy:asnumpy",
    "cupy:ndarray.get",
    "cupy:ndarray.set",
    "cupy:RawKernel.__call__",
]
#: Classes whose public attributes the simulator's must include.
CLASSES = ["nvidia.nvcomp:Array", "nvidia.nvcomp:BatchArray", "nvidia.nvcomp:Codec"]
#: Subclasses of other packages' classes whose bases and own methods the simulator's must equal.
SUBCLASSES = ["kvikio.zarr:GDSStore"]
#: nvCOMP C functions (``nvidia.libnvcomp``'s headers) whose parameter lists the simulator's
#: stand-ins must equal, and the option structs they take by value.
C_ALGORITHMS = ("Zstd", "LZ4", "Deflate", "Snappy")
C_FUNCTIONS = [
    f"nvcompBatched{a}{suffix}"
    for a in C_ALGORITHMS
    for suffix in ("DecompressGetTempSize", "DecompressAsync")
]
C_STRUCTS = [f"nvcompBatched{a}DecompressOpts_t" for a in C_ALGORITHMS]
#: Enums whose members the simulator's must equal.
ENUMS = ["nvidia.nvcomp:BitstreamKind", "nvidia.nvcomp:ChecksumPolicy"]

_OVERLOAD = re.compile(r"^(?:\d+\. )?([\w.]+)\((.*)\)(?: -> .*)?$")


def resolve(spec: str) -> Any:
    """The object named ``module:qualname``."""
    mod, _, qual = spec.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _from_doc(fn: Any, name: str) -> list[list[list[Any]]]:
    """pybind11 overloads from the docstring's signature lines."""
    overloads = []
    for line in (fn.__doc__ or "").splitlines():
        m = _OVERLOAD.match(line.strip())
        if m is None or m.group(1).rsplit(".", 1)[-1] != name:
            continue
        if m.group(2).replace(" ", "") in ("*args,**kwargs", "self,/,*args,**kwargs"):
            continue  # pybind11's generic first line
        params = []
        star = False
        for p in _split_params(m.group(2)):
            if p in ("*", "\\*"):
                star = True
                continue
            if p in ("/", "*args", "**kwargs"):
                continue
            pname = p.split(":")[0].split("=")[0].strip()
            if pname == "self":
                continue
            kind = "KEYWORD_ONLY" if star else "POSITIONAL_OR_KEYWORD"
            params.append([pname, kind, "=" in p])
        overloads.append(params)
    return overloads


def signatures(spec: str) -> list[list[list[Any]]]:
    """The overloads of one callable."""
    fn = resolve(spec)
    name = spec.rsplit(".", 1)[-1].split(":")[-1]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    generic = sig is None or [p.kind for p in sig.parameters.values()] in (
        [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD],
        [
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ],
    )
    if generic:
        return _from_doc(fn, name)
    assert sig is not None
    return [
        [
            [p.name, p.kind.name, p.default is not inspect.Parameter.empty]
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    ]


def subclass_layout(spec: str) -> dict[str, list[str]]:
    """A class's bases (``module.qualname``) and the methods it defines itself."""
    cls = resolve(spec)
    defines = [
        name
        for name, attr in vars(cls).items()
        if isinstance(attr, (staticmethod, classmethod, property))
        or (callable(attr) and not isinstance(attr, type))
    ]
    return {
        "bases": [f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__],
        "defines": sorted(defines),
    }


def codec_options() -> list[str]:
    """Keyword arguments ``nvcomp.Codec`` documents (common and per algorithm)."""
    doc = resolve("nvidia.nvcomp:Codec.__init__").__doc__ or ""
    return sorted(set(re.findall(r"^\s+(\w+): ", doc, flags=re.M)))


def _headers(include: str | None = None) -> str:
    """The text of nvCOMP's algorithm headers (from the installed ``nvidia.libnvcomp``)."""
    if include is None:
        spec = importlib.util.find_spec("nvidia.libnvcomp")
        assert spec is not None and spec.submodule_search_locations
        include = str(Path(next(iter(spec.submodule_search_locations))) / "include" / "nvcomp")
    names = ("zstd.h", "lz4.h", "deflate.h", "snappy.h")
    return "\n".join((Path(include) / n).read_text() for n in names)


def _normalize(decl: str) -> str:
    return re.sub(r"\s*\*\s*", "* ", re.sub(r"\s+", " ", decl)).strip()


def c_declarations(include: str | None = None) -> dict[str, Any]:
    """Parameter lists of :data:`C_FUNCTIONS` and fields of :data:`C_STRUCTS`, from headers.

    A parameter is ``[type, name]`` (whitespace and ``const`` placement normalized: ``const
    void* const* device_compressed_chunk_ptrs``); a field ``[type, name, array length]``.
    """
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", _headers(include), flags=re.S)
    functions = {}
    for name in C_FUNCTIONS:
        m = re.search(rf"nvcompStatus_t\s+{name}\s*\((.*?)\)\s*;", text, flags=re.S)
        assert m is not None, f"{name} not declared"
        params = []
        for p in _split_params(m.group(1)):
            decl = _normalize(p)
            ptype, _, pname = decl.rpartition(" ")
            params.append([ptype.strip(), pname])
        functions[name] = params
    structs = {}
    for name in C_STRUCTS:
        m = re.search(r"typedef struct\s*\{([^}]*)\}\s*" + name + r"\s*;", text, flags=re.S)
        assert m is not None, f"{name} not declared"
        fields = []
        for f in m.group(1).split(";"):
            decl = _normalize(f)
            if not decl:
                continue
            n = re.search(r"\[(\d+)\]$", decl)
            decl = decl[: n.start()] if n else decl
            ftype, _, fname = decl.rpartition(" ")
            fields.append([ftype, fname, int(n.group(1)) if n else 0])
        structs[name] = fields
    return {"functions": functions, "structs": structs}


def collect() -> dict[str, Any]:
    """Every fact, from whatever modules are importable as ``nvidia.nvcomp``, ``kvikio``..."""
    return {
        "callables": {spec: signatures(spec) for spec in CALLABLES},
        "classes": {
            spec: sorted(n for n in dir(resolve(spec)) if not n.startswith("_")) for spec in CLASSES
        },
        "enums": {spec: sorted(resolve(spec).__members__) for spec in ENUMS},
        "subclasses": {spec: subclass_layout(spec) for spec in SUBCLASSES},
        "codec_options": codec_options(),
        "c_declarations": c_declarations(),
    }


if __name__ == "__main__":
    facts = collect()
    versions = {}
    for mod in ("nvidia.nvcomp", "kvikio", "cupy", "zarr"):
        m = importlib.import_module(mod)
        versions[mod] = getattr(m, "__version__", "?")
    facts["versions"] = versions
    json.dump(facts, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
