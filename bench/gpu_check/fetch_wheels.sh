#!/usr/bin/env bash
# Download the wheels the GPU machine lacks into .whl/ at the repository root, for Python 3.12
# on x86-64: nvCOMP and kvikio with their C libraries (CUDA 13); zarr, numcodecs, crc32c,
# zstandard and zarr's own requirements. Run here, where pip reaches PyPI; the device machine
# installs them with --no-index (run.sh). CuPy 14 for CUDA 13, numpy, pyyaml, packaging and
# tensorstore are already there. Check the total (du, at the end) against the device tool's
# 64 MiB per call; drop what the machine turns out to have.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
PY=${PYTHON:-python3}
platforms=()
for n in 28 27 17; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for spec in \
    "nvidia-nvcomp-cu13==6.0.0.12" \
    "nvidia-libnvcomp-cu13==6.0.0.12" \
    "kvikio-cu13==26.10.0" \
    "libkvikio-cu13==26.10.0" \
    "rapids-logger==0.3.0" \
    "zarr==3.4.2" \
    "numcodecs==0.17.1" \
    "zstandard==0.25.0" \
    "crc32c==2.9.post0" \
    "donfig==0.8.1.post1" \
    "google-crc32c==1.9.0" \
    "msgspec==0.23.0"; do
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d .whl "$spec"
done
# Their own requirements, to compare with what the device machine has (cuda-bindings, numpy,
# nvidia-cufile are there already; anything else missing must be added above).
for w in .whl/*.whl; do
  echo "== $w"; unzip -p "$w" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' || true
done
du -sh .whl
