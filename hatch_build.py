"""Build hook: compile cuzarr's batch helper (``src/cuzarr/_native/czbatch.c``) into the wheel.

The helper is plain C loaded with ctypes (no Python headers), built with the system's C
compiler (``$CC``, else ``cc``). Without a compiler the build goes on and cuzarr uses its
pure-Python paths (``cuzarr._native.available()`` is then false; CI requires the helper with
``CUZARR_REQUIRE_NATIVE=1``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/cuzarr/_native/czbatch.c")
LIBRARY = Path("src/cuzarr/_native/libczbatch.so")


def compile_helper(root: Path) -> str | None:
    """Compile the helper next to its source; the error message, or ``None`` on success."""
    if not sys.platform.startswith("linux"):
        return f"the batch helper is built on Linux only (this is {sys.platform})"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        cc = ["cc"]
        if shutil.which("cc") is None:
            return "no C compiler found ($CC, cc)"
    out = root / LIBRARY
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [*cc, "-O2", "-std=c99", "-pthread", "-Wall", "-Werror", "-shared", "-fPIC",
           "-o", str(tmp), str(root / SOURCE)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"{shlex.join(cmd)} failed: {detail.strip()}"
    os.replace(tmp, out)
    return None


class NativeHelperHook(BuildHookInterface):  # type: ignore[misc]
    """Compiles the batch helper before the wheel (or editable wheel) is built."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile the helper and add it to the wheel (a warning, not a failure, without cc)."""
        root = Path(self.root)
        error = compile_helper(root)
        if error is not None:
            print(f"[cuzarr] batch helper not built ({error}); the pure-Python paths serve",
                  file=sys.stderr)
            return
        build_data["artifacts"].append(str(LIBRARY))
        if version != "editable":
            # A ctypes library: any Python 3, one platform.
            from packaging.tags import platform_tags

            build_data["pure_python"] = False
            build_data["tag"] = f"py3-none-{next(iter(platform_tags()))}"
