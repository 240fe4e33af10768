"""What the comparison runs: engines, datasets, workloads, and how engines are held to N threads.

Shared by every part of the harness (``bench.compare`` and the modules it is split into).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"

#: Engines, in table order. "cuzarr" is zarr with cuzarr.Pipeline; "cuzarr-api" is cuzarr.open.
ENGINES = ("cuzarr", "cuzarr-api", "zarr", "zarr-fused", "zarrs", "tensorstore")
CUZARR_ENGINES = ("cuzarr", "cuzarr-api")
PEERS = ("zarr", "zarr-fused", "zarrs", "tensorstore")
#: zarr's own time: zarr's API with a pipeline that does nothing (bench/zarr_own.py), run on
#: request (``--engines ...,zarr-own``); never verified, never a peer.
ZARR_OWN = "zarr-own"
OPTIONAL_ENGINES = (ZARR_OWN,)
#: The codec floor: every chunk decoded (encoded) in memory with the codec library cuzarr uses.
FLOOR = "floor"
WORKLOADS = ("read_all", "read_chunks", "read_strided", "write_all", "write_partial")
FLOOR_WORKLOADS = ("read_all", "write_all")
DATASET_KEYS = ("a", "b", "c", "d", "e", "f", "g", "h")
#: The independent check: other layouts than the issues' eight (5-D microscopy, a climate
#: grid with partial edge chunks, 4-D shards), run on request (``--datasets i,j,k``), not by
#: default. Their edges need a cube size divisible by 8.
EXTRA_DATASET_KEYS = ("i", "j", "k")
ALL_DATASET_KEYS = DATASET_KEYS + EXTRA_DATASET_KEYS
STRIDE = 4
#: Repeats of write_partial per round, at least (best counts, as for ``--repeats``): one call
#: is 1-25 ms, where one sample's jitter is as large as the engines' differences.
PARTIAL_REPEATS = 5
#: Workloads timed several times a round: their ratios are reported for the best call (the
#: headline and the targets) and for the median call (what a typical call costs).
MULTI_CALL_WORKLOADS = ("write_partial",)
SEED = 0
ZARR_PIPELINES = {
    "zarr": "zarr.core.codec_pipeline.BatchedCodecPipeline",
    "zarr-fused": "zarr.core.codec_pipeline.FusedCodecPipeline",
    "zarrs": "zarrs.ZarrsCodecPipeline",
    "cuzarr": "cuzarr.zarr_pipeline.Pipeline",
    ZARR_OWN: "bench.zarr_own.NoOpPipeline",
}
#: How each engine is held to N threads (recorded in the results).
THREAD_CONTROLS = {
    "cuzarr": "cuzarr.configure(threads=N, strict=True) (the engine's pool); "
    "zarr threading.max_workers=N",
    "cuzarr-api": "cuzarr.open(..., settings=cuzarr.Settings(threads=N, strict=True))",
    "zarr": "zarr threading.max_workers=N (the executor codecs run on via asyncio.to_thread); "
    "async.concurrency left at 10 (a bound on chunks in flight, not threads)",
    "zarr-fused": "zarr codec_pipeline.max_workers=N (the fused pipeline's pool) and "
    "threading.max_workers=N",
    "zarrs": "zarr threading.max_workers=N (zarrs passes it as num_threads to its Rust pool), "
    "RAYON_NUM_THREADS=N, codec_pipeline.strict=True (no silent fallback to zarr's pipeline)",
    "tensorstore": "Context data_copy_concurrency.limit=N and file_io_concurrency.limit=N; "
    "no cache pool (TensorStore's default)",
    ZARR_OWN: "zarr threading.max_workers=N (its pipeline does no work, so no thread runs any)",
    "floor": "the libraries cuzarr codes with: zstd decoded by numcodecs' libzstd in one call "
    "(chunks of 64 KiB or more) or python-zstandard, encoded by python-zstandard; other codecs "
    "numcodecs decode/encode with out= buffers; on a ThreadPoolExecutor of N threads",
    "all": "numcodecs.blosc.use_threads=False in every process (blosc never adds threads of its "
    "own); each engine and thread count has one persistent worker process, and the engines "
    "take turns cell by cell (rounds in rotating order, bench/interleave.py)",
}
