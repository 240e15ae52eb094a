#!/usr/bin/env bash
# The npm packages as a user installs them (run by scripts/test): packs `stockade` and
# `@stockade-sh/linux-x64` from a built binary (scripts/build-npm), installs them from those .tgz
# files only (`--offline`, with the pinned `ws` packed by install-npm-deps.sh) into fresh npm
# prefixes, and uses them with nothing but Node.js, npm and the base system on PATH (no Rust):
#   - `stockade run 'seq 1 3000000'` (global install) prints the README's tail and notice;
#   - the TypeScript client (npm-client.mjs, as a `node -e` one-liner) runs a command, reads
#     100 MiB back by cursor byte-exact, waits with `until`, writes to and resizes a PTY, kills a
#     tree with 0 left — over the local socket (auto-started daemon) and over wss:// with a token
#     and a CA file;
#   - `npx @stockade-sh/cli mcp` answers initialize and is gone promptly after SIGTERM (npm-mcp.mjs).
# The binary: STOCKADE_STATIC_BIN, default the CI artefact target/artifacts/stockade-static
# (scripts/build-artifacts). Everything it starts is stopped and removed on any exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
die() {
    echo "tests/packaging/npm.sh: $*" >&2
    exit 1
}
artifacts=$(realpath -m -- "${CARGO_TARGET_DIR:-target}/artifacts")
binary=${STOCKADE_STATIC_BIN:-$artifacts/stockade-static}
[[ -x $binary ]] || die "no stockade binary at $binary; build it with scripts/build-artifacts (or point STOCKADE_STATIC_BIN at one)"
command -v openssl >/dev/null || die "openssl is missing (it makes the test CA); apt-get install openssl"

tests/packaging/install-npm-deps.sh
scripts/build-npm "$binary" >/dev/null
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
tgz=("$artifacts/stockade-sh-cli-$version.tgz" "$artifacts/stockade-sh-linux-x64-$version.tgz"
    "$root/target/npm-build/ws-$(node -p 'require("./npm/stockade/package.json").dependencies.ws').tgz")

work=$(mktemp -d /tmp/stockade-npm.XXXXXX)
door_pid=
cleanup() {
    local status=$?
    [[ -n $door_pid ]] && kill -TERM "$door_pid" 2>/dev/null && wait "$door_pid" 2>/dev/null
    if [[ -x $work/global/bin/stockade ]]; then
        STOCKADE_HOME=$work/state "$work/global/bin/stockade" daemon stop >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
mkdir -p "$work/home" "$work/project" "$work/data"
chmod 700 "$work"
# The user's environment: no cargo, no rustup, a home of its own (npm's cache starts empty).
clean() {
    env -i PATH="$work/global/bin:/usr/bin:/bin" HOME="$work/home" STOCKADE_HOME="$work/state" "$@"
}
clean sh -c '! command -v cargo && ! command -v rustc' >/dev/null || die "cargo or rustc is on the clean PATH"

npm_quiet=(--offline --no-audit --no-fund --loglevel=error)
clean npm install -g --prefix "$work/global" "${npm_quiet[@]}" "${tgz[@]}" >/dev/null ||
    die "npm install -g of the packed .tgz files failed"
(cd "$work/project" && clean npm install "${npm_quiet[@]}" "${tgz[@]}" >/dev/null) ||
    die "npm install of the packed .tgz files into a project failed"
[[ $(clean sh -c 'command -v stockade') == "$work/global/bin/stockade" ]] || die "npm -g put no stockade on PATH"

# The README's first example, piped: the tail, then the notice naming the spool.
out=$(clean stockade run 'seq 1 3000000')
grep -qx 'Exit code: 0' <<<"$out" || die "stockade run printed no 'Exit code: 0': $out"
tail -n 3 <<<"$out" | head -n 2 | tr '\n' ' ' | grep -qx '2999999 3000000 ' || die "the tail is not 2999999, 3000000: $out"
notice=$(tail -n 1 <<<"$out")
[[ $notice =~ ^\[…\ 22,872,896\ bytes\ /\ 2,998,000\ lines\ omitted\.\ Full\ output:\ $work/state/spool/.*/output\.log\.\ Read\ more:\ stockade\ read\ sh-[0-9]+\ --after\ 0,\ or\ stockade\ grep\ sh-[0-9]+\ REGEX\]$ ]] ||
    die "the notice is not the README's: $notice"
echo "npm: stockade run 'seq 1 3000000': tail and notice as in the README"

# The client over the local socket: it starts the daemon itself through the bundled binary.
(cd "$work/project" && clean DATA="$work/data" node --input-type=module -e "$(cat "$root/tests/packaging/npm-client.mjs")") ||
    die "the TypeScript client failed over the local socket"
rm -f "$work/data"/*

# A daemon with a TLS door (a test CA, a certificate for 127.0.0.1, a 0600 token) and the client over wss://.
(
    cd "$work/data"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
        -days 2 -subj "/CN=stockade test CA"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=stockade daemon" \
        -keyout key.pem -out door.csr
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >door.ext
    openssl x509 -req -days 2 -CAcreateserial -in door.csr -CA ca.pem -CAkey ca.key -out cert.pem -extfile door.ext
    chmod 600 key.pem
    (umask 077 && openssl rand -hex 32 >token)
) >/dev/null 2>&1 || die "openssl could not make the test CA and certificate"
mkdir -p "$work/tls"
mv "$work/data"/{ca.pem,cert.pem,key.pem,token} "$work/tls/" && rm -f "$work/data"/*
env -i PATH="$work/global/bin:/usr/bin:/bin" HOME="$work/home" STOCKADE_HOME="$work/door-state" \
    "$work/global/lib/node_modules/@stockade-sh/linux-x64/bin/stockade" daemon run --ws 127.0.0.1:0 \
    --token-file "$work/tls/token" --tls-cert "$work/tls/cert.pem" --tls-key "$work/tls/key.pem" \
    2>"$work/door.log" &
door_pid=$!
url=
for _ in $(seq 100); do
    url=$(grep -o 'wss://127\.0\.0\.1:[0-9]*' "$work/door.log" || true)
    [[ -n $url ]] && break
    kill -0 "$door_pid" 2>/dev/null || die "the daemon with the TLS door exited: $(cat "$work/door.log")"
    sleep 0.1
done
[[ -n $url ]] || die "the daemon with the TLS door did not say where it listens within 10 s: $(cat "$work/door.log")"
(cd "$work/project" && clean DATA="$work/data" REMOTE="$url" TOKEN_FILE="$work/tls/token" CA_FILE="$work/tls/ca.pem" \
    node --input-type=module -e "$(cat "$root/tests/packaging/npm-client.mjs")") ||
    die "the TypeScript client failed over $url"
kill -TERM "$door_pid" && wait "$door_pid" || die "the daemon with the TLS door did not stop cleanly on SIGTERM"
door_pid=

# npx from the project, as MCP client configurations run it.
(cd "$work/project" && env -i PATH="$work/project/node_modules/.bin:/usr/bin:/bin" HOME="$work/home" \
    STOCKADE_HOME="$work/state" node "$root/tests/packaging/npm-mcp.mjs") || die "npx @stockade-sh/cli mcp failed"

clean stockade daemon stop >/dev/null || die "stockade daemon stop failed"
echo "npm: all checks passed"
