#!/usr/bin/env python3
"""Run zarr-python's own test suite with zarr's default pipeline and with cuzarr's.

cuzarr's promise as a drop-in codec pipeline is that a user loses nothing zarr-python
guarantees. This script checks it against zarr's own tests, for the *installed* zarr version:

1. fetch that version's source distribution (``pip download --no-binary :all:``; cached in
   ``$CUZARR_CACHE`` or ``~/.cache/cuzarr``) and unpack its ``tests/``;
2. run the test files below three times, at once: with zarr's default pipeline; with
   ``ZARR_CODEC_PIPELINE__PATH=cuzarr.Pipeline`` plus zarr's shared ``CodecPipelineTests``
   subclassed with ``pipeline_path = "cuzarr.Pipeline"`` (zarr's own buffers, as the
   environment and ``codec_pipeline.path`` select cuzarr); and the same with zarr's
   ``ndbuffer`` set to ``cuzarr.zarr_buffers.AlignedNDBuffer``, as ``cuzarr.configure()`` sets
   it;
3. fail if any test that passes (or is an expected failure) under zarr's pipeline does not
   under a cuzarr run, except the differences listed for that run (:data:`EXPECTED`,
   :data:`EXPECTED_ALIGNED`), each with its reason.

The counts come last. Usage::

    .venv/bin/python scripts/zarr_suite.py [--serial] [--keep-logs DIR] [-- PYTEST_ARGS]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: The parts of zarr's suite that exercise the codec pipeline (arrays, indexing, codecs,
#: the API, v2, resize, pipeline parity, property tests, the shared pipeline suite).
TEST_FILES = (
    "tests/test_array.py",
    "tests/test_indexing.py",
    "tests/test_codecs",
    "tests/test_api.py",
    "tests/test_v2.py",
    "tests/test_resize.py",
    "tests/test_pipeline_parity.py",
    "tests/test_properties.py",
    "tests/test_codec_pipeline_suite.py",
)

#: zarr's shared pipeline suite, run once more for cuzarr's pipeline (written into the
#: unpacked tests; its results are compared with ``TestBatchedPipeline``'s).
CUZARR_SUITE_FILE = "tests/test_cuzarr_codec_pipeline_suite.py"
CUZARR_SUITE = textwrap.dedent(
    '''
    """zarr's CodecPipelineTests for cuzarr.Pipeline (written by cuzarr's zarr_suite.py)."""

    from tests.test_codec_pipeline_suite import CodecPipelineTests


    class TestCuzarrPipeline(CodecPipelineTests):
        pipeline_path = "cuzarr.Pipeline"
    '''
)
#: In the cuzarr run, the classes that pin zarr's own pipelines test zarr, not cuzarr.
ZARR_ONLY = ("TestBatchedPipeline", "TestFusedPipeline")

#: Tests allowed to differ, node id -> the reason a reviewer accepted. Empty: cuzarr's
#: pipeline passes everything zarr's does. An entry needs a reason such as "inspects zarr's
#: own pipeline class"; a wrong result or a missing feature is never one.
EXPECTED: dict[str, str] = {}

#: zarr's ``ndbuffer`` as ``cuzarr.configure()`` sets it (the third run).
ALIGNED_NDBUFFER = "cuzarr.zarr_buffers.AlignedNDBuffer"

_PINNED_NESTED = (
    "the test pins zarr's own BatchedCodecPipeline (not cuzarr's) over nested shards while "
    "zarr's ndbuffer is configure()'s AlignedNDBuffer: zarr 3.4.2's sharding then asks its "
    "in-shard getters for a nested shard's index with its fixed numpy_buffer_prototype() and "
    "they refuse it ('Non-default buffer prototypes are not supported within shards'), as "
    "with any ndbuffer class but zarr's own; cuzarr's pipeline serves nested shards itself, "
    "and its fallback adapts those getters (_zarr_compat.in_shard_batch)"
)
#: ... allowed to differ in the run with configure()'s buffer only.
EXPECTED_ALIGNED: dict[str, str] = {
    "tests/test_codecs/test_sharding.py::test_sharding_orthogonal_set_multiple_array_dims"
    f"[{case}-nested-zarr.core.codec_pipeline.BatchedCodecPipeline]": _PINNED_NESTED
    for case in (
        "2d-arr-arr",
        "2d-arr-arr-unsorted-two-shards",
        "3d-arr-arr-arr",
        "3d-arr-arr-int",
        "3d-arr-int-arr",
        "3d-arr1-arr-int",
        "3d-int-arr-arr",
    )
}

PASSING = frozenset({"passed", "xfailed"})


@dataclass
class Run:
    """One pytest run of the suite and its outcome per test."""

    name: str
    #: zarr settings for this run (environment variables); none: zarr's defaults.
    env: dict[str, str] = field(default_factory=dict)
    #: Tests allowed to fail here though they pass with zarr's pipeline, with the reasons.
    expected: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    returncode: int = 0
    seconds: float = 0.0

    def count(self, *kinds: str) -> int:
        """Tests whose outcome is one of ``kinds``."""
        return sum(1 for o in self.outcomes.values() if o in kinds)


def say(text: str) -> None:
    """Print a progress line."""
    print(f"[zarr-suite] {text}", flush=True)


def zarr_version() -> str:
    """The installed zarr-python's version (the suite must be that version's)."""
    from importlib.metadata import version

    return version("zarr")


def cache_dir() -> Path:
    """Where downloaded and unpacked source distributions are kept."""
    root = os.environ.get("CUZARR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cuzarr"
    )
    path = Path(root) / "zarr-suite"
    path.mkdir(parents=True, exist_ok=True)
    return path


def unpacked_sdist(version: str) -> Path:
    """The unpacked source distribution of zarr ``version`` (downloaded once)."""
    cache = cache_dir()
    tree = cache / f"zarr-{version}"
    if (tree / "tests" / "conftest.py").is_file():
        return tree
    archive = cache / f"zarr-{version}.tar.gz"
    if not archive.is_file():
        say(f"downloading the source distribution of zarr {version}")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", f"zarr=={version}",
                    "-d", tmp,
                ],
                check=True,
            )
            found = list(Path(tmp).glob("zarr-*.tar.gz"))
            if len(found) != 1:
                raise SystemExit(f"expected one zarr sdist from pip download, got {found}")
            shutil.move(found[0], archive)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        inner = Path(tmp) / f"zarr-{version}"
        if not (inner / "tests" / "conftest.py").is_file():
            raise SystemExit(f"{archive} holds no tests/ folder")
        if tree.exists():
            shutil.rmtree(tree)
        shutil.move(inner, tree)
    return tree


def start(run: Run, tree: Path, report: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    """Start one pytest run in the unpacked tree, writing a junit report and a log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZARR_", "CUZARR_"))}
    env.update(run.env)
    files = list(TEST_FILES)
    deselect: list[str] = []
    if run.name != "zarr":
        files.append(CUZARR_SUITE_FILE)
        deselect = ["-k", " and ".join(f"not {c}" for c in ZARR_ONLY)]
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        # zarr's addopts ask for pytest-benchmark and doctests of its sources: not needed.
        "-o", "addopts=", "-o", "junit_family=xunit2", "-rfE",
        f"--junitxml={report}", *deselect, *extra, *files,
    ]  # fmt: skip
    log = report.with_suffix(".log").open("wb")
    return subprocess.Popen(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)


def node_id(case: ET.Element) -> str:
    """pytest's node id of a junit ``testcase`` ("tests.test_x.TestClass" + "test_y[p]")."""
    parts = case.get("classname", "").split(".")
    classes = [p for p in parts if p[:1].isupper()]
    path = "/".join(p for p in parts if not p[:1].isupper()) + ".py"
    return "::".join([path, *classes, case.get("name", "")])


def read_report(run: Run, report: Path) -> None:
    """Fill ``run.outcomes`` (and failure messages) from its junit report."""
    if not report.is_file():
        return
    for case in ET.parse(report).getroot().iter("testcase"):
        node = node_id(case)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                lines = (child.get("message") or "").splitlines()
                run.messages[node] = lines[0][:300] if lines else ""
            elif child.tag == "skipped":
                outcome = "xfailed" if "xfail" in child.get("type", "") else "skipped"
        run.outcomes[node] = outcome


def counterpart(node: str) -> str:
    """The default run's node for a node of the cuzarr run (its pipeline suite class)."""
    if node.startswith(CUZARR_SUITE_FILE):
        return node.replace(CUZARR_SUITE_FILE, "tests/test_codec_pipeline_suite.py", 1).replace(
            "::TestCuzarrPipeline::", "::TestBatchedPipeline::", 1
        )
    return node


def main() -> int:
    """Run both pipelines, compare, print the counts; exit status 1 on any extra failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serial", action="store_true", help="one run after the other")
    parser.add_argument("--keep-logs", type=Path, help="copy the pytest logs and reports here")
    parser.add_argument("pytest_args", nargs="*", help="passed to both pytest runs (after --)")
    args = parser.parse_args()

    version = zarr_version()
    tree = unpacked_sdist(version)
    (tree / CUZARR_SUITE_FILE).write_text(CUZARR_SUITE)
    say(f"zarr-python {version}'s tests from {tree}")
    cuzarr_env = {"ZARR_CODEC_PIPELINE__PATH": "cuzarr.Pipeline"}
    runs = [
        Run("zarr"),
        Run("cuzarr", env=cuzarr_env, expected=EXPECTED),
        Run(
            "cuzarr+aligned",
            env={**cuzarr_env, "ZARR_NDBUFFER": ALIGNED_NDBUFFER},
            expected=EXPECTED_ALIGNED,
        ),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        reports = [Path(tmp) / f"{r.name}.xml" for r in runs]
        began = time.monotonic()
        procs: list[subprocess.Popen[bytes]] = []
        for run, report in zip(runs, reports, strict=True):
            procs.append(start(run, tree, report, args.pytest_args))
            if args.serial:
                run.returncode = procs[-1].wait()
                run.seconds = time.monotonic() - began
                began = time.monotonic()
        if not args.serial:
            for run, proc in zip(runs, procs, strict=True):
                run.returncode = proc.wait()
                run.seconds = time.monotonic() - began
        for run, report in zip(runs, reports, strict=True):
            read_report(run, report)
            tail = report.with_suffix(".log").read_text(errors="replace").splitlines()[-1:]
            say(f"{run.name} run: exit {run.returncode} in {run.seconds:.0f} s: {tail}")
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for report in reports:
                for path in (report, report.with_suffix(".log")):
                    if path.is_file():
                        shutil.copy(path, args.keep_logs / path.name)
        broken = [r for r in runs if not r.outcomes or r.returncode not in (0, 1)]
        for run in broken:
            log = (Path(tmp) / f"{run.name}.log").read_text(errors="replace")
            print(log[-6000:])

    zarr_run = runs[0]
    extra: list[tuple[str, str, str, str]] = []
    allowed: list[tuple[str, str, str]] = []
    missing: list[tuple[str, str]] = []
    for cuzarr_run in runs[1:]:
        for node, outcome in sorted(cuzarr_run.outcomes.items()):
            if outcome in PASSING:
                continue
            before = zarr_run.outcomes.get(counterpart(node))
            if before in PASSING:
                if node in cuzarr_run.expected:
                    allowed.append((cuzarr_run.name, node, cuzarr_run.expected[node]))
                else:
                    message = cuzarr_run.messages.get(node, "")
                    extra.append((cuzarr_run.name, node, outcome, message))
        ran = {counterpart(n) for n in cuzarr_run.outcomes}
        missing += [
            (cuzarr_run.name, n)
            for n, o in sorted(zarr_run.outcomes.items())
            if o in PASSING and n not in ran and not any(f"::{c}::" in n for c in ZARR_ONLY)
        ]
    for name, node, outcome, message in extra:
        print(f"EXTRA {outcome.upper()} ({name}) {node}: {message}")
    for name, node, _reason in allowed:
        print(f"expected difference ({name}) {node}")
    for reason in dict.fromkeys(reason for _name, _node, reason in allowed):
        print(f"  because {reason}")
    for name, node in missing:
        print(f"NOT RUN ({name}): {node}")
    for run in runs:
        say(
            f"{run.name + ':':16} {run.count('passed'):5} passed, "
            f"{run.count('failed', 'error'):3} failed, {run.count('skipped'):4} skipped, "
            f"{run.count('xfailed'):2} xfailed"
        )
    failed = bool(extra or missing or broken)
    say(
        f"extra failures with cuzarr.Pipeline: {len(extra)} (allowed differences: "
        f"{len(allowed)}, not run: {len(missing)}) -> {'FAILED' if failed else 'OK'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
