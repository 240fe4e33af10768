# The README's two commands: `make bench` (the main job) and `make test` (the test suite:
# cuzarr's own tests, then zarr-python's suite with cuzarr's pipeline against zarr's own).
# Each first runs scripts/bootstrap.sh, which creates .venv (Python >= 3.12) when needed.
.PHONY: no-native bench test unit gpu-sim gpu-api-facts zarr-suite lint venv

VENV := .venv/bin

venv:
	@scripts/bootstrap.sh test

bench: venv
	$(VENV)/cuzarr bench $(ARGS)

test: unit no-native gpu-sim zarr-suite

unit: venv
	$(VENV)/python -m pytest -q $(ARGS)

# The pure-Python paths an install without a C compiler takes (CUZARR_NATIVE=0: the batch
# helper unused): the parity suite and the tests of every path the helper otherwise serves.
NO_NATIVE_TESTS = tests/parity tests/test_api.py tests/test_chunk_by_chunk_reads.py \
	tests/test_zstd_batches.py tests/test_large_zstd_reads.py tests/test_inner_grids.py \
	tests/test_shard_splice.py \
	tests/test_local_replace.py tests/test_box_writes.py tests/test_batch_puts.py \
	tests/test_light_chunks.py tests/test_hardening_untrusted.py tests/test_streaming_copy.py \
	tests/test_blosc_split_reads.py
no-native: venv
	CUZARR_NATIVE=0 CUZARR_REQUIRE_NATIVE=0 $(VENV)/python -m pytest -q $(NO_NATIVE_TESTS) $(ARGS)

# The GPU backend on the strict device simulator (tests/gpu_sim): tests/gpu and the host-side
# GPU tests with line coverage of cuzarr.gpu (the floor only ever goes up).
gpu-sim: venv
	$(VENV)/python -m pytest -q tests/gpu tests/test_gpu_prep.py tests/test_gpu_crc.py tests/test_gpu_sim_api.py \
		--gpu-sim --cov=cuzarr.gpu --cov-report=term-missing --cov-fail-under=95 $(ARGS)

# Refresh tests/gpu_sim/api_facts.json from the real nvCOMP, kvikio and CuPy wheels (they
# import without a GPU) in .gpu-api/, then check the simulator against it.
gpu-api-facts: venv
	test -x .gpu-api/bin/python || $(VENV)/python -m venv .gpu-api
	.gpu-api/bin/pip install -q numpy "nvidia-nvcomp-cu13==6.0.0.12" "cupy-cuda13x==14.2.0" \
		"kvikio-cu13==26.10.0" "zarr==3.4.2"
	.gpu-api/bin/python tests/gpu_sim/api_facts.py > tests/gpu_sim/api_facts.json
	CUZARR_GPU_API_PYTHON=.gpu-api/bin/python $(VENV)/python -m pytest -q tests/test_gpu_sim_api.py

zarr-suite: venv
	$(VENV)/python scripts/zarr_suite.py

lint:
	@scripts/bootstrap.sh dev
	$(VENV)/ruff check src tests scripts hatch_build.py
	$(VENV)/mypy
