#!/usr/bin/env bash
# One command on a GPU machine (under 5 minutes on an H200): install the carried wheels, answer
# the open API questions, run the GPU test suite, then measure. Results land in $OUT (or
# bench/results/ when OUT is unset): api_probe.json, probe_errors.json, pytest_gpu.log,
# profile_read.txt, gpu_check.json, bench_gpu.json (`cuzarr bench --device gpu`: zarr's pipelines
# and cuzarr's engine on the GPU, every result checked against the data).
#
#   device run:  carry [".whl"], command "bash bench/gpu_check/run.sh", timeout_s 540
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
# cuzarr's own pure-Python dependencies must be importable too (zarr, numcodecs, crc32c);
# carry their wheels in .whl/ when the machine lacks them.
python3 -c "import zarr, numcodecs, crc32c, cupy; print('zarr', zarr.__version__, 'cupy', cupy.__version__)" || exit 1
# The batch helper (src/cuzarr/_native) is a build output, not carried: build it here.
cc -O2 -std=c99 -pthread -shared -fPIC -o src/cuzarr/_native/libczbatch.so \
    src/cuzarr/_native/czbatch.c || echo "native helper not built: the pure-Python paths run"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/nvidia_smi.txt"

echo "== 1/4 API probe (open questions)"
timeout 90 python3 bench/gpu_check/probe_api.py "$OUT/api_probe.json"
echo "== 1b/4 how nvCOMP reports corrupt and short streams"
timeout 60 python3 bench/gpu_check/probe_errors.py "$OUT/probe_errors.json"
echo "== 2/4 GPU test suite"
# Every failure, not the first: a GPU is lent rarely. pytest-asyncio (zarr's suite only) is not
# on that machine, so --strict-config would refuse its ini key; the rest of addopts stays.
# test_gpu_corrupt.py feeds nvCOMP corrupt streams; one that faults loses the CUDA context for
# the rest of its process, so it runs in a process of its own, after the rest.
timeout 170 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider --timeout 60 \
    --ignore=tests/gpu/test_gpu_corrupt.py \
    -o addopts="-ra --strict-markers" -W ignore::pytest.PytestConfigWarning 2>&1 | tee "$OUT/pytest_gpu.log" | tail -30
timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_gpu_corrupt.py -p no:cacheprovider \
    --timeout 30 -o addopts="-ra --strict-markers" -W ignore::pytest.PytestConfigWarning 2>&1 \
    | tee "$OUT/pytest_gpu_corrupt.log" | tail -8
echo "== 2b/4 where a GPU read's time goes"
timeout 60 python3 bench/gpu_check/profile_read.py "$OUT/profile_read.txt" > /dev/null
echo "== 3/4 measurements"
timeout 300 python3 bench/gpu_check/measure.py "$OUT/gpu_check.json" --size-gib "${SIZE_GIB:-1}"
echo "== 4/4 cuzarr bench --device gpu (the command users run)"
timeout 120 python3 -m cuzarr bench --device gpu --repeats 2 --json "$OUT/bench_gpu.json" \
    2>&1 | tee "$OUT/bench_gpu.txt" | tail -12
ls -la "$OUT"
