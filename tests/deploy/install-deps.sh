#!/usr/bin/env bash
# Installs what the remote/deploy tests use and nobody in this project wrote, under target/:
# - Debian's busybox-static (target/deploy-deps/busybox): the /bin/sh of the minimal root the
#   namespace tests chroot the daemon into (extracted from the .deb, nothing installed system-wide);
# - a venv (target/deploy-venv) with kubernetes-validate (bundles the Kubernetes OpenAPI schemas),
#   jsonschema and PyYAML (the SandboxTemplate against the vendored CRD schema) and
#   prometheus-client (its OpenMetrics parser reads /metrics).
# Called by scripts/test. Idempotent; offline once installed. Network: Debian's archive, PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

KUBERNETES_VALIDATE_VERSION=1.37.0
PROMETHEUS_CLIENT_VERSION=0.26.0
JSONSCHEMA_VERSION=4.26.0
PYYAML_VERSION=6.0.3

deps=target/deploy-deps
if [[ ! -x $deps/busybox ]]; then
    echo "scripts/test: fetching Debian's busybox-static into $deps" >&2
    mkdir -p "$deps/deb"
    (cd "$deps/deb" && { apt-get download busybox-static >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get download busybox-static >/dev/null; }; }) ||
        die "cannot download Debian's busybox-static (is the Debian archive reachable? apt-get download busybox-static)"
    rm -rf "$deps/x"
    dpkg-deb -x "$deps"/deb/busybox-static_*.deb "$deps/x" || die "cannot unpack busybox-static"
    cp "$deps/x/bin/busybox" "$deps/busybox"
    "$deps/busybox" true || die "the busybox-static binary does not run here"
fi

need_python
pip_install target/deploy-venv \
    "target/deploy-venv/.installed-$KUBERNETES_VALIDATE_VERSION-$PROMETHEUS_CLIENT_VERSION-$JSONSCHEMA_VERSION-$PYYAML_VERSION" \
    "the deploy test tools" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    "prometheus-client==$PROMETHEUS_CLIENT_VERSION" \
    "jsonschema==$JSONSCHEMA_VERSION" \
    "PyYAML==$PYYAML_VERSION"
