#!/usr/bin/env bash
# Installs what the packaging test (tests/packaging/python.sh) needs beyond the Rust toolchain,
# pinned, into target/: maturin, which packs the already built static binary and the Python
# client into a wheel (target/packaging-venv), and the wheel of the client's one dependency,
# websockets, kept in target/packaging-wheels so the test installs the wheel into a fresh
# virtualenv from local files only (`pip install --no-index`); and mypy (target/mypy-venv), which
# checks the client and its documented examples with --strict (crates/stockade/tests/it/client_python.rs).
# Called by scripts/test. Idempotent: once the pinned versions are in place this only checks a
# stamp. Network: PyPI only.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

MATURIN_VERSION=1.16.0
MYPY_VERSION=1.13.0
WEBSOCKETS_VERSION=17.4

need_python
pip_install target/packaging-venv "target/packaging-venv/.installed-$MATURIN_VERSION" \
    "maturin" "maturin==$MATURIN_VERSION"
pip_install target/mypy-venv "target/mypy-venv/.installed-$MYPY_VERSION" \
    "mypy" "mypy==$MYPY_VERSION"
stamp="target/packaging-wheels/.downloaded-$WEBSOCKETS_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: downloading websockets $WEBSOCKETS_VERSION into target/packaging-wheels" >&2
    target/packaging-venv/bin/python -m pip download --quiet --disable-pip-version-check \
        --only-binary=:all: -d target/packaging-wheels "websockets==$WEBSOCKETS_VERSION" ||
        die "pip could not download websockets==$WEBSOCKETS_VERSION (is PyPI reachable?)"
    touch "$stamp"
fi
