#!/bin/sh
# Installs bubblewrap (`bwrap`) for `stockade bench spawn`'s side-by-side row (Debian/Ubuntu).
set -eu
if command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-bubblewrap: no apt-get here; install bubblewrap with this system's package manager" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get install -y bubblewrap || { $SUDO apt-get update -qq && $SUDO apt-get install -y bubblewrap; }
