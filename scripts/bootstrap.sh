#!/usr/bin/env bash
# Create or refresh the project's virtual environment in .venv (Python >= 3.12, as zarr 3.2+
# requires) and install cuzarr editable with an extra (default: test; `dev` adds ruff and mypy).
#
#   scripts/bootstrap.sh [EXTRA]      e.g. scripts/bootstrap.sh dev
#
# The Python is the first of: $CUZARR_PYTHON; python3.13 / python3.12 / python3 on PATH;
# $(pyenv root)/versions/3.13*/bin/python3, then 3.12* (pyenv root falls back to ~/.pyenv when
# pyenv is not on PATH). Each candidate is run to check its version (pyenv shims exist on PATH
# even for versions that are not active). A second run with an unchanged pyproject.toml only
# checks a stamp file and returns (the stamp also covers the batch helper's C source).
set -euo pipefail

extra="${1:-test}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.cuzarr-install-stamp"

say() { echo "[bootstrap] $*" >&2; }

# Prints the path if "$1" runs and is CPython >= 3.12.
usable_python() {
    local exe="$1"
    "$exe" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1 \
        && "$exe" -c 'import sys; print(sys.executable)' 2>/dev/null
}

pyroot=""
if command -v pyenv >/dev/null 2>&1; then
    pyroot="$(pyenv root 2>/dev/null || true)"
fi
[[ -n "$pyroot" ]] || pyroot="${PYENV_ROOT:-$HOME/.pyenv}"

find_python() {
    local candidates=() c found
    [[ -n "${CUZARR_PYTHON:-}" ]] && candidates+=("$CUZARR_PYTHON")
    candidates+=(python3.13 python3.12 python3)
    # Newest patch release first within each minor version.
    local minor
    for minor in 3.13 3.12; do
        while IFS= read -r c; do
            candidates+=("$c")
        done < <(ls -d "$pyroot"/versions/"$minor"*/bin/python3 2>/dev/null | sort -rV)
    done
    for c in "${candidates[@]}"; do
        if found="$(usable_python "$c")" && [[ -n "$found" ]]; then
            echo "$found"
            return 0
        fi
    done
    return 1
}

# The test servers that are not Python packages (tests/loopback/node: Azurite, for the Azure
# Blob tests), installed with npm from the pinned lock file. Stamped by the lock file's hash.
install_node_servers() {
    local dir="$root/tests/loopback/node" nstamp want_node
    nstamp="$dir/node_modules/.cuzarr-install-stamp"
    want_node="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
    [[ -f "$nstamp" && "$(cat "$nstamp")" == "$want_node" ]] && return 0
    if ! command -v npm >/dev/null 2>&1; then
        say "npm not found: the Azure Blob tests (Azurite) will be skipped"
        say "(install Node.js >= 20 with npm, then run this script again)"
        return 0
    fi
    say "installing the test servers (npm ci in tests/loopback/node: Azurite)"
    (cd "$dir" && npm ci --silent --no-audit --no-fund --ignore-scripts >/dev/null)
    echo "$want_node" >"$nstamp"
}

if [[ "$extra" == test || "$extra" == dev ]]; then
    install_node_servers
fi

# What an install is built from: the metadata, and the batch helper the build hook compiles.
hash_of() {
    cat "$root/pyproject.toml" "$root/hatch_build.py" "$root/src/cuzarr/_native/czbatch.c" \
        | sha256sum | cut -d' ' -f1
}
want="$(hash_of) $extra"

if [[ -x "$venv/bin/python" ]] && usable_python "$venv/bin/python" >/dev/null \
    && [[ -f "$stamp" ]]; then
    have="$(cat "$stamp")"
    # The dev extra includes test, so a dev install also satisfies a test request.
    if [[ "$have" == "$want" || ( "$extra" == test && "$have" == "$(hash_of) dev" ) ]]; then
        exit 0
    fi
fi

if ! [[ -x "$venv/bin/python" ]] || ! usable_python "$venv/bin/python" >/dev/null; then
    if ! py="$(find_python)"; then
        say "ERROR: no Python >= 3.12 found (zarr 3.2+ requires it)."
        say "Looked for \$CUZARR_PYTHON, python3.13, python3.12 and python3 on PATH, and"
        say "$pyroot/versions/3.13*, 3.12* (pyenv)."
        say "Install Python 3.12 or 3.13 (e.g. 'pyenv install 3.12') or set CUZARR_PYTHON."
        exit 1
    fi
    say "creating .venv with $py ($("$py" -c 'import platform; print(platform.python_version())'))"
    rm -rf "$venv"
    "$py" -m venv "$venv"
fi

say "installing cuzarr[$extra] into .venv (editable)"
rm -f "$stamp"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e "$root[$extra]"
echo "$want" >"$stamp"
say "done: $("$venv/bin/python" -c 'import sys, cuzarr; print("cuzarr", cuzarr.__version__, "on Python", sys.version.split()[0])')"
