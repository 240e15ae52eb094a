#!/usr/bin/env bash
# Installs E2B's SDKs, unmodified, for the e2b tests (crates/stockade/tests/it/e2b.rs): the
# Python SDK from PyPI into target/e2b-venv and the JS SDK from npm into target/e2b-js, pinned.
# Called by scripts/test. Idempotent: once the pinned versions are in place this only checks a
# stamp. Network: PyPI and the npm registry only.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

E2B_PY_VERSION=2.63.0
E2B_JS_VERSION=2.51.0

need_python
need_node
pip_install target/e2b-venv "target/e2b-venv/.installed-e2b-$E2B_PY_VERSION" \
    "the E2B Python SDK" "e2b==$E2B_PY_VERSION"
npm_install target/e2b-js "target/e2b-js/.installed-e2b-$E2B_JS_VERSION" \
    "the E2B JS SDK" "e2b@$E2B_JS_VERSION"
