#!/usr/bin/env bash
# What the cli_* tests need beyond the Rust toolchain: `man` (man-db) to render the generated
# man page, `tmux` to drive a real terminal (cli_terminal). Idempotent; does nothing when both
# are installed already, so it works offline then.
set -euo pipefail
if command -v man >/dev/null 2>&1 && command -v tmux >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "tests/cli/install-deps.sh: install man-db and tmux (apt-get install man-db tmux) to run the man page and terminal tests" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends man-db tmux >/dev/null
