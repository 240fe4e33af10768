"""``device="auto"`` on the CPU side: the crossover setting, its parsing, the choice without a GPU.

The GPU side (``GpuHostBackend`` past the crossover) is tested in tests/gpu/test_gpu_auto.py.
"""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends import select
from cuzarr.config import Settings, get_settings
from cuzarr.engine import ArrayEngine


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(select, "gpu_status", lambda: "no GPU in this test")


def _array(path):
    z = zarr.create_array(path, shape=(40,), chunks=(10,), dtype="<i4")
    z[...] = np.arange(40, dtype="<i4")


#: The integer settings read from the environment: (variable, attribute, cases of raw -> value).
ENV_INTS = [
    (
        "CUZARR_GPU_CROSSOVER_BYTES",
        "gpu_crossover_bytes",
        [("1048576", 1 << 20), ("1", 1), ("", None), (None, None)],
    ),
    (
        "CUZARR_GPU_WAVE_BYTES",
        "gpu_wave_bytes",
        [("268435456", 1 << 28), ("1", 1), ("", 1 << 30), (None, 1 << 30)],
    ),
]


@pytest.mark.parametrize(
    ("variable", "attribute", "raw", "want"),
    [(v, a, raw, want) for v, a, cases in ENV_INTS for raw, want in cases],
)
def test_integer_settings_come_from_the_environment(monkeypatch, variable, attribute, raw, want):
    if raw is None:
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, raw)
    assert getattr(Settings.from_env(), attribute) == want


@pytest.mark.parametrize("variable", [v for v, _a, _cases in ENV_INTS])
@pytest.mark.parametrize("raw", ["abc", "1.5", "0", "-4", "8MiB", "1GiB"])
def test_a_bad_integer_in_the_environment_is_named(monkeypatch, variable, raw):
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ValueError, match=variable) as info:
        Settings.from_env()
    assert repr(raw) in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, True, "4096", 1.5])
def test_a_bad_crossover_setting_is_refused(bad):
    with pytest.raises(ValueError, match=r"gpu_crossover_bytes"):
        Settings(gpu_crossover_bytes=bad)
    with pytest.raises(ValueError, match=r"gpu_crossover_bytes"):
        cuzarr.configure(gpu_crossover_bytes=bad)


@pytest.mark.parametrize("bad", [0, -1, True, None, "4096", 1.5])
def test_a_bad_gpu_wave_setting_is_refused(bad):
    with pytest.raises(ValueError, match=r"gpu_wave_bytes: expected an integer >= 1"):
        Settings(gpu_wave_bytes=bad)


def test_configure_sets_and_restores_the_crossover():
    before = get_settings().gpu_crossover_bytes
    with cuzarr.configure(gpu_crossover_bytes=4096):
        assert get_settings().gpu_crossover_bytes == 4096
    assert get_settings().gpu_crossover_bytes == before


def test_auto_without_a_gpu_stays_on_the_cpu_and_says_why(tmp_path, no_gpu, caplog):
    _array(tmp_path / "a")
    with caplog.at_level(logging.INFO, logger="cuzarr"):
        a = cuzarr.open(tmp_path / "a", device="auto", settings=Settings(gpu_crossover_bytes=8))
    assert a._engine.backend.name == "cpu"
    assert type(a[...]) is np.ndarray
    assert "on the CPU: no usable GPU (no GPU in this test)" in caplog.text
    codec = a._engine.codec
    assert select.auto_on_gpu(Settings(), codec) == (
        False,
        "no gpu_crossover_bytes measured on this machine",
    )
    assert select.auto_on_gpu(Settings(gpu_crossover_bytes=41), codec)[0] is False
    assert select.backend_for(Settings(), codec, device=cuzarr.Device.CPU).name == "cpu"


def test_a_gpu_host_engine_unpickled_without_a_gpu_runs_on_the_cpu(tmp_path, no_gpu):
    _array(tmp_path / "a")
    engine = cuzarr.open(tmp_path / "a", device="cpu")._engine
    state = engine.__getstate__()
    state["backend"] = "gpu-host"
    clone = ArrayEngine.__new__(ArrayEngine)
    clone.__setstate__(state)
    assert clone.backend.name == "cpu"
    assert pickle.loads(pickle.dumps(clone)).backend.name == "cpu"
    assert select.backend_named("cpu", Settings()).name == "cpu"
