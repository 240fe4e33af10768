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
    for key in ("callables", "classes", "enums", "subclasses", "codec_options"):
        assert real[key] == FACTS[key], f"api_facts.json is stale in '{key}': make gpu-api-facts"
    assert sys.version_info >= (3, 12)
