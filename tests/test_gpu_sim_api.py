"""The device simulator declares exactly the APIs of the real nvCOMP, kvikio and CuPy.

``tests/gpu_sim/api_facts.json`` holds the signatures the real modules declare (extracted by
``tests/gpu_sim/api_facts.py``; ``make gpu-api-facts`` refreshes it from the pinned wheels).
The first tests hold the simulator to that file on every run; the last checks the file
against the real modules where they are installed (``CUZARR_GPU_API_PYTHON``: a Python that
imports them, as ``make gpu-api-facts`` sets up).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FACTS = json.loads((HERE / "gpu_sim" / "api_facts.json").read_text())


@pytest.fixture(scope="module")
def sim_modules():
    import gpu_sim

    was = gpu_sim.installed()
    gpu_sim.install()
    yield
    if not was:
        gpu_sim.uninstall()


def _sim_overloads(fn) -> list[list[list]]:
    sigs = getattr(fn, "__signatures__", None) or [inspect.signature(fn)]
    return [
        [
            [p.name, p.kind.name, p.default is not inspect.Parameter.empty]
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        for sig in sigs
    ]


@pytest.mark.parametrize("spec", sorted(FACTS["callables"]))
def test_simulator_signatures_are_the_real_ones(sim_modules, spec):
    from gpu_sim.api_facts import resolve

    real = FACTS["callables"][spec]
    sim = _sim_overloads(resolve(spec))
    # Every overload the simulator accepts is one the real module declares...
    for overload in sim:
        assert overload in real, f"{spec}: the simulator accepts {overload}, not declared"
    # ...and every declared overload binds to one of the simulator's.
    for overload in real:
        names = [p[0] for p in overload]
        assert any([p[0] for p in s] == names for s in sim) or any(
            _binds(s, overload) for s in sim
        ), f"{spec}: declared overload {names} is not accepted by the simulator"


def _binds(sim_overload, real_overload) -> bool:
    sim_names = [p[0] for p in sim_overload]
    required = [p[0] for p in sim_overload if not p[2]]
    real_names = [p[0] for p in real_overload]
    return set(real_names) <= set(sim_names) and set(required) <= set(real_names)


@pytest.mark.parametrize("spec", sorted(FACTS["classes"]))
def test_simulator_classes_have_the_real_attributes(sim_modules, spec):
    from gpu_sim.api_facts import resolve

    have = {n for n in dir(resolve(spec)) if not n.startswith("_")}
    missing = set(FACTS["classes"][spec]) - have
    assert not missing, f"{spec} lacks {sorted(missing)}"


@pytest.mark.parametrize("spec", sorted(FACTS["enums"]))
def test_simulator_enums_have_the_real_members(sim_modules, spec):
    from gpu_sim.api_facts import resolve

    assert sorted(resolve(spec).__members__) == FACTS["enums"][spec]


@pytest.mark.parametrize("spec", sorted(FACTS["subclasses"]))
def test_simulator_subclasses_have_the_real_bases_and_methods(sim_modules, spec):
    from gpu_sim.api_facts import subclass_layout

    assert subclass_layout(spec) == FACTS["subclasses"][spec]


def test_simulator_codec_takes_the_documented_options_only(sim_modules):
    from nvidia import nvcomp

    from gpu_sim import _nvcomp

    allowed = set(_nvcomp._COMMON).union(*_nvcomp._PER_ALGORITHM.values())
    assert allowed == set(FACTS["codec_options"])
    with pytest.raises(TypeError, match="level"):
        nvcomp.Codec(algorithm="Zstd", level=3)  # no zstd level on the GPU
    with pytest.raises(TypeError, match="algorithm_type"):
        nvcomp.Codec(algorithm="Zstd", algorithm_type=1)  # Deflate's option, not Zstd's
    codec = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW)
    with pytest.raises(TypeError, match="incompatible"):
        codec.decode([])  # a list is no declared overload


@pytest.mark.parametrize("name", sorted(FACTS["c_declarations"]["functions"]))
def test_simulator_c_functions_take_the_headers_parameters(sim_modules, name):
    # Each C parameter of nvCOMP's header, in order, as the simulator's stand-in checks it
    # (and so as cuzarr.gpu.nvcomp_batched must declare it): size_t by value, the options
    # struct by value, the temp-size query's host size_t*, every other pointer (device
    # memory) and the stream as void*.
    from gpu_sim import _libnvcomp

    declared = FACTS["c_declarations"]["functions"][name]
    sim = getattr(_libnvcomp.load_library(), name)._params
    assert len(sim) == len(declared), name
    for (ctype, pname), kind in zip(declared, sim, strict=True):
        if ctype == "size_t":
            want = _libnvcomp._SIZE_T
        elif ctype.endswith("DecompressOpts_t"):
            want = _libnvcomp._OPTS
        elif ctype == "size_t*" and pname == "temp_bytes":
            want = _libnvcomp._SIZE_T_P
        elif ctype.endswith("*") or ctype.endswith("* const") or ctype == "cudaStream_t":
            want = _libnvcomp._VOID_P
        else:
            raise AssertionError(f"{name}: no simulator kind for {ctype} {pname}")
        assert kind is want, f"{name}: {ctype} {pname} is {want}, the simulator has {kind}"


def test_option_structs_are_64_zeroable_bytes(sim_modules):
    # Every field is a 4-byte enum or int (all zero by default in the headers) or reserved
    # bytes: 64 bytes each, the size cuzarr passes by value.
    import ctypes

    from cuzarr.gpu import nvcomp_batched

    for name, fields in FACTS["c_declarations"]["structs"].items():
        size = sum(n if ftype == "char" else 4 for ftype, _, n in fields)
        assert size == 64, name
        assert [f for f in fields if f[0] == "char"] == [
            ["char", "reserved", size - 4 * (len(fields) - 1)]
        ]
    assert ctypes.sizeof(nvcomp_batched.DecompressOpts) == 64
    assert sorted(nvcomp_batched.ALGORITHMS) == sorted(
        n.removeprefix("nvcompBatched").removesuffix("DecompressAsync")
        for n in FACTS["c_declarations"]["functions"]
        if n.endswith("DecompressAsync")
    )


def test_facts_file_matches_the_real_modules():
    python = os.environ.get("CUZARR_GPU_API_PYTHON")
    if not python:
        pytest.skip("CUZARR_GPU_API_PYTHON not set (make gpu-api-facts installs the real wheels)")
    proc = subprocess.run(
        [python, str(HERE / "gpu_sim" / "api_facts.py")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    real = json.loads(proc.stdout)
    for key in ("callables", "classes", "enums", "subclasses", "codec_options", "c_declarations"):
        assert real[key] == FACTS[key], f"api_facts.json is stale in '{key}': make gpu-api-facts"
    assert sys.version_info >= (3, 12)
