"""cuzarr's comparison benchmark harness (run ``python -m bench.compare``; see README.md)."""
