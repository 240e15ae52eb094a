#!/usr/bin/env bash
# Installs what building the npm packages needs, pinned, into target/npm-build: the TypeScript
# compiler and the type definitions the client compiles against (Node 20's, and those of `ws`, the
# WebSocket library the client uses for wss:// on Node 20, which has no WebSocket with headers).
# Called by scripts/build-npm and scripts/test. Idempotent: once the pinned versions are in place
# this only checks a stamp. Network: the npm registry only.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

need_node
# The pinned versions are the package's own: its devDependencies and its one dependency.
pinned() {
    node -e 'const p = require(process.argv[1]); const v = p.devDependencies[process.argv[2]] ?? p.dependencies[process.argv[2]];
             if (!v) process.exit(1); console.log(v)' "$PWD/npm/stockade/package.json" "$1" ||
        die "npm/stockade/package.json pins no version of $1"
}
TYPESCRIPT_VERSION=$(pinned typescript)
TYPES_NODE_VERSION=$(pinned @types/node)
WS_VERSION=$(pinned ws)
TYPES_WS_VERSION=$(pinned @types/ws)

npm_install target/npm-build \
    "target/npm-build/.installed-ts-$TYPESCRIPT_VERSION-node-$TYPES_NODE_VERSION-ws-$WS_VERSION-$TYPES_WS_VERSION" \
    "TypeScript and the type definitions of the npm client" \
    "typescript@$TYPESCRIPT_VERSION" "@types/node@$TYPES_NODE_VERSION" \
    "ws@$WS_VERSION" "@types/ws@$TYPES_WS_VERSION"
# The client's one dependency as a .tgz, so the packaging test installs from local files only.
if [[ ! -f target/npm-build/ws-$WS_VERSION.tgz ]]; then
    (cd target/npm-build && npm pack --silent "ws@$WS_VERSION" >/dev/null) ||
        die "npm could not pack ws@$WS_VERSION (is the npm registry reachable?)"
fi
