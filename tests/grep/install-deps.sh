#!/usr/bin/env bash
# Installs Debian's ripgrep, the yardstick of the grep speed test and bench case (grep over a
# spool against `rg -n` on the same file). Called by scripts/test. Idempotent: does nothing when
# `rg` is on PATH. Network: the Debian archive only (apt-get), and only when rg is missing.
set -euo pipefail

if command -v rg >/dev/null; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "scripts/test: ripgrep (rg) is missing; install it (Debian/Ubuntu: apt-get install ripgrep)" >&2
    exit 1
fi
echo "scripts/test: installing ripgrep with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends ripgrep >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends ripgrep >/dev/null; } ||
    { echo "scripts/test: cannot install ripgrep; install it by hand (apt-get install ripgrep)" >&2; exit 1; }
