#!/usr/bin/env bash
# The static binary in the smallest container there is: a chroot holding busybox, the binary and
# a few files of /etc — no C library, no loader, no NSS module. It must have no dynamic
# dependency (readelf, ldd), and serve as PID 1 of new PID and mount namespaces (the way a
# container runtime starts it): answer over its Unix socket and its TLS door, reached by a host
# name from /etc/hosts (glibc's built-in `files` lookup, linked in), run sessions in the chroot,
# and allocate with jemalloc. A static C probe checks the same glibc answers user and host
# lookups there (getpwuid, getgrgid, getaddrinfo) without its shared NSS modules.
#
#   tests/packaging/static-pid1.sh BINARY WORKDIR      (root; called by tests/packaging/python.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$1
r=$2
fail() { echo "tests/packaging/static-pid1.sh: FAILED: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || fail "this check needs root (unshare --pid --mount, chroot); run the tests as root"
for tool in unshare chroot readelf ldd openssl cc; do
    command -v $tool >/dev/null || fail "this check needs \`$tool\`"
done
busybox=${CARGO_TARGET_DIR:-target}/deploy-deps/busybox
[[ -x $busybox ]] || fail "busybox-static is not at $busybox: run tests/deploy/install-deps.sh (scripts/test does)"

if readelf -d "$bin" | grep '(NEEDED)'; then fail "$bin has dynamic dependencies"; fi
ldd_says=$(ldd "$bin" 2>&1 || true)
grep -Eq 'statically linked|not a dynamic executable' <<<"$ldd_says" || fail "ldd $bin: $ldd_says"
echo "readelf: no NEEDED; ldd: $(echo $ldd_says); $(stat -c %s "$bin") bytes"

launcher=
cleanup() {
    local status=$?
    if [[ -n $launcher ]]; then
        # SIGTERM to the daemon by its host pid (the launcher's one child); `daemon stop` would
        # wait for pid 1 to go away, which on the host is init.
        daemon=$(cat "/proc/$launcher/task/$launcher/children" 2>/dev/null || true)
        [[ -n $daemon ]] && kill -TERM $daemon 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$launcher" 2>/dev/null || true
        wait "$launcher" 2>/dev/null || true
    fi
    umount -l "$r/dev" 2>/dev/null || true
    umount -l "$r/proc" 2>/dev/null || true
    rm -rf "$r"
    exit $status
}
trap cleanup EXIT

mkdir -p "$r"/{bin,proc,dev,tmp,state,etc,tls}
chmod 1777 "$r/tmp"
chmod 700 "$r/state"
cp "$busybox" "$r/bin/busybox"
for applet in $("$r/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$r/bin/$applet"
done
cp "$bin" "$r/stockade"
printf 'root:x:0:0:root:/:/bin/sh\nagent:x:10001:10001:agent:/tmp:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\nagent:x:10001:\n' >"$r/etc/group"
printf '127.0.0.1 localhost door.test\n' >"$r/etc/hosts"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$r/etc/nsswitch.conf"
[[ -z $(find "$r" -name 'lib*.so*' -o -name 'ld-linux*') ]] || fail "a shared library got into the root"

# The probe: the same static glibc, asked for a user, a group and a host by name.
cat >"$r/tmp/probe.c" <<'C'
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
int main(void) {
    struct passwd *pw = getpwuid(10001);
    struct group *gr = getgrgid(10001);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_INET;
    int rc = getaddrinfo("door.test", NULL, &hints, &ai);
    char ip[64] = "?";
    if (rc == 0) inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof ip);
    printf("user %s group %s door.test %s\n", pw ? pw->pw_name : "?", gr ? gr->gr_name : "?", rc == 0 ? ip : gai_strerror(rc));
    return !(pw && gr && rc == 0 && strcmp(pw->pw_name, "agent") == 0 && strcmp(ip, "127.0.0.1") == 0);
}
C
cc -static -O1 -o "$r/probe" "$r/tmp/probe.c" 2>/dev/null || fail "cannot build the static probe (cc -static)"
probe=$(chroot "$r" /probe) || fail "glibc's static lookups failed in the chroot: $probe"
echo "static glibc in the chroot: $probe"

(
    cd "$r/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
        -out ca.pem -days 2 -subj "/CN=stockade static test CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=door.test" \
        -keyout key.pem -out door.csr 2>/dev/null
    printf 'subjectAltName=DNS:door.test,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >door.ext
    openssl x509 -req -days 2 -CAcreateserial -in door.csr -CA ca.pem -CAkey ca.key \
        -out cert.pem -extfile door.ext 2>/dev/null
    chmod 600 key.pem ca.key
    openssl rand -hex 32 >"$r/token"
    chmod 600 "$r/token"
)

# In the new mount namespace: the host's /dev bound in, /proc of the new PID namespace; then
# exec through chroot, so the daemon is PID 1.
unshare --pid --mount --fork --kill-child --propagation private sh -c "
    mount --rbind /dev '$r/dev' && mount -t proc proc '$r/proc' && cd '$r' &&
    exec chroot . /stockade --home /state daemon run --no-cgroup --ws 127.0.0.1:0 \
        --token-file /token --tls-cert /tls/cert.pem --tls-key /tls/key.pem" \
    </dev/null 2>"$r/daemon.log" &
launcher=$!
port=
for _ in $(seq 300); do
    port=$(grep -o 'wss://127\.0\.0\.1:[0-9]*' "$r/daemon.log" | head -1 | sed 's/.*://' || true)
    [[ -n $port ]] && break
    kill -0 "$launcher" 2>/dev/null || fail "the daemon exited: $(cat "$r/daemon.log")"
    sleep 0.1
done
[[ -n $port ]] || fail "the daemon did not say it listens: $(cat "$r/daemon.log")"
grep -q ', pid 1$' "$r/daemon.log" || fail "the daemon is not PID 1: $(cat "$r/daemon.log")"
echo "$(grep listening "$r/daemon.log")"

# Over its Unix socket, from the host (the socket is a file in the chroot); a background run,
# so the daemon runs it (a foreground `run` of the CLI runs in the CLI itself).
cli=("$bin" --home "$r/state" --no-autostart)
id=$("${cli[@]}" run --bg --json --cwd / 'echo in-the-chroot $(ls /); cat /proc/1/comm' | sed -n 's/.*"id": *"\(sh-[0-9]*\)".*/\1/p' | head -1)
[[ -n $id ]] || fail "the daemon started no session"
"${cli[@]}" wait --timeout 20s "$id" >/dev/null || fail "$id did not exit 0"
out=$("${cli[@]}" read "$id" | cat)
grep -q '^in-the-chroot bin .*etc probe proc state stockade tls tmp token$' <<<"$out" || fail "the session did not run in the chroot: $out"
grep -qx 'stockade' <<<"$out" || fail "PID 1 of the session's namespace is not stockade: $out"
allocated=$("${cli[@]}" stats --json | sed -n 's/.*"allocated_bytes": *\([0-9]*\).*/\1/p')
[[ ${allocated:-0} -gt 0 ]] || fail "jemalloc reports no allocated bytes: $("$bin" --home "$r/state" stats --json)"
echo "jemalloc: $allocated bytes allocated"
# Over its TLS door, from inside the chroot, by a host name only /etc/hosts knows, with no /dev
# at all (a scratch image may have none): the client's randomness (TLS, WebSocket masks) comes
# from getrandom(2), never /dev/urandom (scripts/static-rustflags.sh).
[[ -z $(ls -A "$r/dev") ]] || fail "the client's chroot should have an empty /dev"
remote=$(chroot "$r" /stockade --home /tmp/client --remote "wss://door.test:$port" \
    --token-file /token --ca-file /tls/ca.pem run 'echo over the door' 2>&1 | cat)
grep -qx 'over the door' <<<"$remote" || fail "the door did not answer by name: $remote"
echo "static binary as PID 1 in a busybox chroot: socket, wss by host name, sessions, jemalloc: ok"
