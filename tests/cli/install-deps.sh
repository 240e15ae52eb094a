#!/usr/bin/env bash
# What the cli_* tests need beyond the Rust toolchain: `man` (man-db) to render the generated
# man page. Idempotent; does nothing when it is already installed, so it works offline then.
set -euo pipefail
if command -v man >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "tests/cli/install-deps.sh: install man-db (apt-get install man-db) to run the man page test" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends man-db >/dev/null
