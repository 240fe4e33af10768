# The README's two commands: `make bench` (the main job) and `make test` (the test suite).
# Each first runs scripts/bootstrap.sh, which creates .venv (Python >= 3.12) when needed.
.PHONY: bench test lint venv

VENV := .venv/bin

venv:
	@scripts/bootstrap.sh test

bench: venv
	$(VENV)/cuzarr bench $(ARGS)

test: venv
	$(VENV)/python -m pytest -q $(ARGS)

lint:
	@scripts/bootstrap.sh dev
	$(VENV)/ruff check src tests
	$(VENV)/mypy
