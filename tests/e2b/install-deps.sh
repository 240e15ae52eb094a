#!/usr/bin/env bash
# Installs E2B's SDKs, unmodified, for the e2b tests (crates/stockade/tests/it/e2b.rs): the
# Python SDK from PyPI into target/e2b-venv and the JS SDK from npm into target/e2b-js, pinned.
# Called by scripts/test. Idempotent: once the pinned versions are in place this only checks a
# stamp. Network: PyPI and the npm registry only.
set -euo pipefail
cd "$(dirname "$0")/../.."

E2B_PY_VERSION=2.63.0
E2B_JS_VERSION=2.51.0

die() {
    echo "scripts/test: $*" >&2
    exit 1
}

command -v python3 >/dev/null ||
    die "python3 is missing; install Python >= 3.10 with venv support (Debian/Ubuntu: apt-get install python3 python3-venv)"

venv=target/e2b-venv
stamp="$venv/.installed-e2b-$E2B_PY_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: installing the E2B Python SDK (e2b==$E2B_PY_VERSION) into $venv" >&2
    python3 -m venv "$venv" ||
        die "cannot create a venv with $(command -v python3); install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "e2b==$E2B_PY_VERSION" ||
        die "pip could not install e2b==$E2B_PY_VERSION (is PyPI reachable?)"
    touch "$stamp"
fi

command -v node >/dev/null ||
    die "node is missing; install Node.js >= 20 with npm (https://nodejs.org, or apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is missing; install it with Node.js (apt-get install npm)"
js=target/e2b-js
jstamp="$js/.installed-e2b-$E2B_JS_VERSION"
if [[ ! -f $jstamp ]]; then
    echo "scripts/test: installing the E2B JS SDK (e2b@$E2B_JS_VERSION) into $js" >&2
    mkdir -p "$js"
    npm install --prefix "$js" --no-audit --no-fund --loglevel=error "e2b@$E2B_JS_VERSION" ||
        die "npm could not install e2b@$E2B_JS_VERSION (is the npm registry reachable?)"
    touch "$jstamp"
fi
