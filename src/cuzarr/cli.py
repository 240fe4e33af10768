"""The ``cuzarr`` command line.

Each subcommand registers itself in :func:`build_parser` with an ``add_*`` function that adds
its parser and sets ``handler`` (a function of the parsed arguments returning an exit status).
Commands: ``cuzarr info``, ``cuzarr copy``, ``cuzarr verify`` (whose logic lives in
:mod:`cuzarr.tools`), ``cuzarr bench [TARGET]`` and ``cuzarr bench --compare ...``. Errors are
one line on stderr, ``cuzarr: error: ...``, with exit status 2 (``--debug`` shows the traceback
instead); progress bars are drawn only when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _progress(message: str) -> None:
    print(f"[cuzarr bench] {message}", file=sys.stderr, flush=True)


def _checkout_root() -> Path | None:
    """The source checkout this cuzarr runs from, if it has ``bench/compare.py``."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "bench" / "compare.py").is_file() else None


_TARGET_HELP = (
    "a local path, file:// URL or object-store URL (s3://, gs://, az://, https://; "
    "credentials and endpoint from the environment, e.g. AWS_ENDPOINT_URL)"
)
_COMPARE_HELP = """\
cuzarr bench --compare runs the comparison harness bench/compare.py, which lives in cuzarr's
source repository and is not part of the installed package. From a checkout:

    pip install -e '.[bench]'
    python -m bench.compare --quick        # or: cuzarr bench --compare --quick
"""


def _run_compare(options: list[str]) -> int:
    import subprocess

    root = _checkout_root()
    if root is None:
        print(_COMPARE_HELP, file=sys.stderr, end="")
        return 2
    import os

    env = dict(os.environ)  # run in the caller's folder, so relative paths mean what they say
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "bench.compare", *options], env=env, check=False)
    return done.returncode


def _run_bench(args: argparse.Namespace) -> int:
    from cuzarr import benchmark
    from cuzarr.bench_device import resolve_device

    if args.compare is not None:
        if args.target is not None or args.keep is not None or args.json is not None:
            print(
                "cuzarr bench: error: --compare takes its own options after it (see "
                "'cuzarr bench --compare --help'); TARGET, --json and --keep do not apply",
                file=sys.stderr,
            )
            return 2
        return _run_compare(list(args.compare))
    if args.target is not None and args.keep is not None:
        print("cuzarr bench: error: --keep applies to generated data only", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    if device == "gpu":
        from cuzarr.backends import gpu_status

        missing = gpu_status()
        if missing is not None:
            print(f"cuzarr bench: error: --device gpu: {missing}", file=sys.stderr)
            return 2
    try:
        if args.target is None:
            report = benchmark.run_benchmark(
                size=args.size,
                repeats=args.repeats,
                threads=args.threads,
                keep=args.keep,
                progress=_progress,
                device=device,
            )
        else:
            report = benchmark.run_target_benchmark(
                args.target, repeats=args.repeats, threads=args.threads, progress=_progress,
                device=device,
            )
    except benchmark.BenchmarkError as exc:
        print(f"cuzarr bench: FAILED: {exc}", file=sys.stderr)
        return 1
    print(benchmark.format_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        _progress(f"wrote {args.json}")
    return 0


def add_bench(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cuzarr bench``: zarr's pipelines against cuzarr's, on generated data or TARGET.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        Where to add the subcommand.
    """
    p = subparsers.add_parser(
        "bench",
        help="benchmark zarr's codec pipelines against cuzarr",
        description=(
            "Without TARGET: generate a seeded uint16 cube (a ramp plus noise, ~2x with zstd), "
            "write it as Zarr v3 arrays (64^3 chunks; 32^3 chunks in 256^3 shards; zstd level "
            "3) and time whole-array reads and writes with zarr's default pipeline, zarr's "
            "fused pipeline and cuzarr. With TARGET: time whole-array reads of that array. "
            "Every result is checked against the data; the table goes to stdout, progress to "
            "stderr."
        ),
    )
    p.add_argument("target", nargs="?", metavar="TARGET", help="an existing array to read")
    p.add_argument(
        "--size", type=_positive_int, default=512, help="edge of the generated cube (512)"
    )
    p.add_argument("--repeats", type=_positive_int, default=3, help="repeats; the best counts (3)")
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="worker threads for every engine (default: each engine's own)",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    p.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="write the generated dataset to DIR and keep it (default: a temporary folder)",
    )
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default=None,
        help="where cuzarr's engine decodes and encodes (default: CUZARR_DEVICE, else auto; "
        "auto: NumPy results, on the GPU from "
        "gpu_crossover_bytes, else the CPU; gpu: CuPy values and results, as "
        "configure(device='gpu'), and fails with what is missing without a GPU)",
    )
    p.add_argument(
        "--compare",
        nargs=argparse.REMAINDER,
        metavar="...",
        help=(
            "run the comparison harness instead (bench/compare.py: zarr's pipelines, "
            "zarrs-python, TensorStore and the codec floor on six datasets); every argument "
            "after --compare goes to it, e.g. --compare --quick. Needs a source checkout"
        ),
    )
    p.set_defaults(handler=_run_bench)


# ------------------------------------------------------------------ info / copy / verify



def _common(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: a --debug given before the command is not reset by the subcommand's default.
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback of an error")


def _threads_settings(threads: int | None) -> Any:
    from dataclasses import replace

    from cuzarr.config import get_settings

    settings = get_settings()
    return settings if threads is None else replace(settings, threads=threads)


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[str, int, int | None], None] | None]:
    """A rich progress bar on stderr when it is a terminal, else no callback (quiet in pipes)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskID,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
        TimeRemainingColumn(), console=Console(stderr=True), transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def update(description: str, done: int, total: int | None) -> None:
        task = tasks.get(description)
        if task is None:
            task = tasks[description] = bar.add_task(description, total=total)
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _print_json(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, indent=2, sort_keys=False))


def _format_gpu(info: dict[str, object]) -> str:
    if not info["usable"]:
        return f"GPU: not usable ({info['reason']})"
    io = info["io"]
    assert isinstance(io, dict)
    mode = "GPUDirect Storage" if io.get("gds") else "kvikio compatibility mode (bounce buffers)"
    lines = [
        f"GPU: {info['device']} ({info['devices']} device(s)), CUDA runtime "
        f"{info['cuda_runtime']}, driver {info['cuda_driver']}, CuPy {info['cupy']}, "
        f"nvCOMP {info['nvcomp']}",
        f"reads: {mode}; kvikio {io.get('kvikio')}, threads {io.get('threads')}, "
        f"bounce buffer {io.get('bounce_buffer_bytes')} bytes, task size {io.get('task_size')}",
    ]
    return "\n".join(lines)


def _run_info(args: argparse.Namespace) -> int:
    from cuzarr.tools import collect_info, format_info, info_to_json

    if args.gpu:
        from cuzarr.backends.probe import gpu_info

        info = gpu_info()
        if args.json:
            _print_json({"schema": "cuzarr.gpu/1", **info})
        else:
            print(_format_gpu(info))
        if args.target is None:
            return 0
    if args.target is None:
        print("cuzarr info: error: TARGET is required (or --gpu)", file=sys.stderr)
        return 2
    nodes = collect_info(args.target)
    if args.json:
        _print_json(info_to_json(nodes, args.target))
    else:
        print(format_info(nodes))
    return 0


def add_info(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cuzarr info``: the tree of groups and arrays of a store.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        Where to add the subcommand.
    """
    p = subparsers.add_parser(
        "info",
        help="show the groups and arrays of a store",
        description=(
            "List every group and array below TARGET with shape, data type, chunks, shards, "
            "codec chain, stored chunks present and missing, stored bytes and compression "
            "ratio. Only the store listing and metadata are read."
        ),
    )
    p.add_argument("target", metavar="TARGET", nargs="?", help=_TARGET_HELP)
    p.add_argument("--json", action="store_true", help="print JSON (schema cuzarr.info/1)")
    p.add_argument(
        "--gpu",
        action="store_true",
        help="report the GPU backend: device, CUDA, nvCOMP, and whether kvikio reads use "
        "GPUDirect Storage or its compatibility mode (JSON schema cuzarr.gpu/1)",
    )
    _common(p)
    p.set_defaults(handler=_run_info)


def _run_verify(args: argparse.Namespace) -> int:
    from cuzarr.tools import verify

    with _progress_bar(not args.json) as progress:
        report = verify(
            args.target,
            threads=_threads_settings(args.threads).n_threads,
            progress=progress,
        )
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.format())
    return 0 if report.ok else 1


def add_verify(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cuzarr verify``: decode every stored chunk and report the corrupt ones.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        Where to add the subcommand.
    """
    p = subparsers.add_parser(
        "verify",
        help="decode every stored chunk and report corrupt or unreadable ones",
        description=(
            "Read and decode every stored chunk of every array below TARGET; for sharded "
            "arrays check each shard index (checksum, bounds) and decode every inner chunk. "
            "Each failure is reported by key. Exit status 1 if any chunk is corrupt or "
            "unreadable; stale temporary files (*.partial) and keys outside the chunk grid "
            "are listed as warnings."
        ),
    )
    p.add_argument("target", metavar="TARGET", help=_TARGET_HELP)
    p.add_argument("--json", action="store_true", help="print JSON (schema cuzarr.verify/1)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="worker threads (default: one per core)")
    _common(p)
    p.set_defaults(handler=_run_verify)


def _shape_arg(text: str) -> tuple[int, ...]:
    from cuzarr.tools import parse_shape

    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shards_arg(text: str) -> Any:
    if text.strip().lower() in ("none", "keep"):
        return text.strip().lower()
    return _shape_arg(text)


def _codec_arg(text: str) -> str:
    from cuzarr.tools import parse_codec

    try:
        parse_codec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _run_copy(args: argparse.Namespace) -> int:
    from cuzarr.tools import CopyOptions, copy

    options = CopyOptions(
        codec=args.codec, chunks=args.chunks, shards=args.shards, zarr_format=args.zarr_format
    )
    with _progress_bar(not args.json) as progress:
        report = copy(
            args.source,
            args.destination,
            options,
            resume=args.resume,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            max_block_bytes=args.block_mb * 1024 * 1024,
            settings=_threads_settings(args.threads),
            progress=progress,
        )
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.format())
    return 0


def add_copy(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cuzarr copy``: copy, re-encode, rechunk, shard or convert an array or group.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        Where to add the subcommand.
    """
    p = subparsers.add_parser(
        "copy",
        help="copy an array or group, re-encoding, rechunking, sharding or converting it",
        description=(
            "Copy the array or group (recursively, attributes included) at SRC to DST. "
            "Options left out keep the source's. Data moves in blocks of whole destination "
            "shards or chunks, each read back and compared with the source (unless "
            "--no-verify). A journal (DST/.cuzarr-copy.json) records finished blocks so that "
            "an interrupted copy can be continued with --resume."
        ),
    )
    p.add_argument("source", metavar="SRC", help=f"the source: {_TARGET_HELP}")
    p.add_argument("destination", metavar="DST", help="the destination (must not exist)")
    p.add_argument("--codec", type=_codec_arg, default=None,
                   help="compressor: none, zstd[:LEVEL], gzip[:LEVEL], "
                        "blosc[:CNAME[:LEVEL[:SHUFFLE]]] (default: the source's)")
    p.add_argument("--chunks", type=_shape_arg, default=None, metavar="N,N,...",
                   help="(inner) chunk shape of every array (default: the source's)")
    p.add_argument("--shards", type=_shards_arg, default="keep", metavar="N,N,...|none",
                   help="shard shape (Zarr v3), or none to remove sharding (default: the "
                        "source's)")
    p.add_argument("--zarr-format", type=int, choices=(2, 3), default=None,
                   help="the destination's Zarr format (default: the source's)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted copy into DST, skipping finished blocks")
    p.add_argument("--overwrite", action="store_true", help="replace an existing local DST")
    p.add_argument("--no-verify", action="store_true",
                   help="do not read written blocks back to compare them with the source")
    p.add_argument("--block-mb", type=_positive_int, default=128, metavar="MB",
                   help="decoded megabytes per block, the bound on memory (128)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="worker threads (default: one per core)")
    p.add_argument("--json", action="store_true", help="print a JSON summary (cuzarr.copy/1)")
    _common(p)
    p.set_defaults(handler=_run_copy)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (KeyError, OSError)) and type(exc).__module__ == "builtins":
        return f"{type(exc).__name__}: {text}"
    return text


def build_parser() -> argparse.ArgumentParser:
    """Return the ``cuzarr`` argument parser with every subcommand.

    Returns
    -------
    argparse.ArgumentParser
        The parser; parsed arguments carry a ``handler`` to call.
    """
    from cuzarr import __version__

    parser = argparse.ArgumentParser(
        prog="cuzarr", description="cuzarr: a fast engine for Zarr arrays."
    )
    parser.add_argument("--version", action="version", version=f"cuzarr {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_info(subparsers)
    add_copy(subparsers)
    add_verify(subparsers)
    add_bench(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cuzarr`` command line.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        The exit status.
    """
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("cuzarr: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"cuzarr: error: {_one_line(exc)}", file=sys.stderr)
        return 2
