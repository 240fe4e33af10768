"""The ``cuzarr`` command line.

Each subcommand registers itself in :func:`build_parser` with an ``add_*`` function that adds
its parser and sets ``handler`` (a function of the parsed arguments returning an exit status).
Today: ``cuzarr bench [TARGET]`` and ``cuzarr bench --compare ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

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
    try:
        if args.target is None:
            report = benchmark.run_benchmark(
                size=args.size,
                repeats=args.repeats,
                threads=args.threads,
                keep=args.keep,
                progress=_progress,
            )
        else:
            report = benchmark.run_target_benchmark(
                args.target, repeats=args.repeats, threads=args.threads, progress=_progress
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
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
    return handler(args)
