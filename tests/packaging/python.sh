#!/usr/bin/env bash
# The Python package as a user meets it, from the built artefacts only: the wheel
# (target/artifacts/stockade-*.whl, made by scripts/build-artifacts) installed into a fresh
# virtualenv from local files, then used with nothing but that venv, /usr/bin and /bin on PATH
# (no Rust, no cargo):
#   - `stockade run 'seq 1 3000000'` prints the README's bounded answer: the tail and the notice;
#   - a `python -c` one-liner, and tests/packaging/checks.py through the client: run, 100 MiB read
#     back by cursor byte-exact, wait with `until`, write to a PTY, kill a tree with 0 left, the
#     asyncio twin — over the local socket (daemon auto-started) and over wss:// with a token and
#     a CA file (a door started with the installed binary, certificates from a CA made here);
#   - the static binary (STOCKADE_STATIC_BIN, default target/artifacts/stockade-static) has no
#     dynamic dependency and serves as PID 1 of new PID and mount namespaces chrooted into a
#     busybox root (needs root and target/deploy-deps/busybox, from tests/deploy/install-deps.sh).
# Everything it starts is stopped on exit, whatever happened. Run by scripts/test.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
target_dir=${CARGO_TARGET_DIR:-$repo/target}
static_bin=${STOCKADE_STATIC_BIN:-$target_dir/artifacts/stockade-static}
fail() { echo "tests/packaging/python.sh: FAILED: $*" >&2; exit 1; }

shopt -s nullglob
wheels=("$target_dir"/artifacts/stockade-*.whl)
((${#wheels[@]} == 1)) || fail "expected one wheel in $target_dir/artifacts (run scripts/build-artifacts first), found ${#wheels[@]}"
wheel=${wheels[0]}
[[ -x $static_bin ]] || fail "no static binary at $static_bin (run scripts/build-artifacts first)"

work=$(mktemp -d "${TMPDIR:-/tmp}/stockade-packaging.XXXXXX")
pids=()
homes=()
cleanup() {
    local status=$?
    for h in "${homes[@]}"; do
        [[ -x $work/venv/bin/stockade ]] && "$work/venv/bin/stockade" --home "$h" daemon stop >/dev/null 2>&1 || true
    done
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$work"
    exit $status
}
trap cleanup EXIT
t0=$(date +%s)

echo "== wheel: $(basename "$wheel") ($(stat -c %s "$wheel") bytes)"
# pip on Alpine (musl) and on glibc systems takes the one wheel, as a user's pip would pick it.
for platform in musllinux_1_2_x86_64 manylinux_2_17_x86_64; do
    pip_dir="$work/pip-$platform"
    python3 -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
        --only-binary=:all: --platform "$platform" --target "$pip_dir" "$wheel" ||
        fail "pip --platform $platform --only-binary=:all: refused the wheel"
    [[ -x $pip_dir/bin/stockade ]] || fail "pip --platform $platform put no bin/stockade in $pip_dir"
done
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$target_dir/packaging-wheels" "$wheel"
# Only the venv, /usr/bin and /bin: no cargo, no rustc, no repository binary.
clean=(env -i "PATH=$work/venv/bin:/usr/bin:/bin" "HOME=$work/userhome" "TMPDIR=$work")
mkdir -p "$work/userhome"
"${clean[@]}" sh -c '! command -v cargo && ! command -v rustc' >/dev/null ||
    fail "cargo or rustc is on the clean PATH"
[[ $("${clean[@]}" sh -c 'command -v stockade') == "$work/venv/bin/stockade" ]] ||
    fail "pip did not put stockade on the venv's PATH"
readelf -d "$work/venv/bin/stockade" | grep -q '(NEEDED)' && fail "the wheel's binary is dynamically linked"
version=$("${clean[@]}" stockade --version) || fail "stockade --version failed"
echo "$version"
[[ $version == *"static, jemalloc allocator)" ]] || fail "the wheel's binary is not the static jemalloc build: $version"

home=$work/home-local
homes+=("$home")
local_env=("${clean[@]}" "STOCKADE_HOME=$home")

echo "== stockade run 'seq 1 3000000' (piped: the bounded answer)"
out=$(cd "$work" && "${local_env[@]}" stockade run 'seq 1 3000000' | cat)
grep -qx 'Exit code: 0' <<<"$out" || fail "no exit code in: $out"
grep -qx '2998001' <<<"$out" || fail "the tail does not start at 2998001"
grep -qx '3000000' <<<"$out" || fail "the tail does not end at 3000000"
grep -q '^\[… 22,872,896 bytes / 2,998,000 lines omitted. Full output: .*/output.log. Read more: stockade read sh-[0-9]* --after 0, or stockade grep sh-[0-9]* REGEX\]$' <<<"$out" ||
    fail "no README notice in: $(tail -2 <<<"$out")"
tail -2 <<<"$out"

echo "== python -c one-liner (local daemon, auto-started by the client)"
"${local_env[@]}" python -c 'import stockade; r = stockade.Client().run("echo one-liner"); assert r.output == "one-liner\n", r; print(r.id, r.state, r.returncode)'

head -c $((100 * 1024 * 1024)) /dev/urandom >"$work/blob"
export STOCKADE_CHECK_BLOB=$work/blob
echo "== client checks over the local socket"
"${local_env[@]}" STOCKADE_CHECK_BLOB="$work/blob" python "$repo/tests/packaging/checks.py" local

echo "== client checks over wss:// with a token and a CA file"
tls=$work/tls
mkdir -p "$tls"
(
    cd "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
        -out ca.pem -days 2 -subj "/CN=stockade packaging test CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=stockade daemon" \
        -keyout key.pem -out door.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >door.ext
    openssl x509 -req -days 2 -CAcreateserial -in door.csr -CA ca.pem -CAkey ca.key \
        -out cert.pem -extfile door.ext 2>/dev/null
    chmod 600 key.pem
    openssl rand -hex 32 >token
    chmod 600 token
)
door_home=$work/home-door
"${clean[@]}" stockade --home "$door_home" daemon run --ws 127.0.0.1:0 --token-file "$tls/token" \
    --tls-cert "$tls/cert.pem" --tls-key "$tls/key.pem" 2>"$work/door.log" &
pids+=($!)
url=
for _ in $(seq 300); do
    url=$(grep -o 'wss://127\.0\.0\.1:[0-9]*' "$work/door.log" | head -1 || true)
    [[ -n $url ]] && break
    kill -0 "${pids[-1]}" 2>/dev/null || fail "the door exited: $(cat "$work/door.log")"
    sleep 0.1
done
[[ -n $url ]] || fail "the door did not say it listens: $(cat "$work/door.log")"
"${clean[@]}" python -c 'import sys, stockade; c = stockade.Client(remote=sys.argv[1], token_file=sys.argv[2], ca_file=sys.argv[3]); print(c.run("echo over wss").output, end="")' "$url/" "$tls/token" "$tls/ca.pem"
"${clean[@]}" STOCKADE_CHECK_BLOB="$work/blob" python "$repo/tests/packaging/checks.py" remote "$url/" "$tls/token" "$tls/ca.pem"
printf 'wrong-token-0123456789\n' >"$work/badtoken"
chmod 600 "$work/badtoken"
"${clean[@]}" python -c 'import sys, stockade
try:
    stockade.Client(remote=sys.argv[1], token_file=sys.argv[2], ca_file=sys.argv[3])
except stockade.DaemonUnavailable as e:
    assert "401" in e.message, e.message; print("a wrong token is refused:", e.message)
else:
    raise SystemExit("a wrong token was accepted")' "$url/" "$work/badtoken" "$tls/ca.pem"

echo "== the static binary as PID 1 in a busybox chroot (PID and mount namespaces)"
tests/packaging/static-pid1.sh "$static_bin" "$work/root"

echo "tests/packaging/python.sh: ok in $(($(date +%s) - t0)) s"
