# The README's two commands: `make bench` (the main job) and `make test` (the test suite:
# cuzarr's own tests, then zarr-python's suite with cuzarr's pipeline against zarr's own).
# Each first runs scripts/bootstrap.sh, which creates .venv (Python >= 3.12) when needed.
.PHONY: bench test unit zarr-suite lint venv

VENV := .venv/bin

venv:
	@scripts/bootstrap.sh test

bench: venv
	$(VENV)/cuzarr bench $(ARGS)

test: unit zarr-suite

unit: venv
	$(VENV)/python -m pytest -q $(ARGS)

zarr-suite: venv
	$(VENV)/python scripts/zarr_suite.py

lint:
	@scripts/bootstrap.sh dev
	$(VENV)/ruff check src tests scripts
	$(VENV)/mypy
