#!/usr/bin/env bash
# The e2b tests' TLS set-up, run as PID 1 of a fresh network, mount and PID namespace
# (crates/stockade/tests/it/e2b.rs): the daemon gets a network namespace of its own, joined to
# the driver's by a veth pair, and serves the E2B door with TLS on its veth address; the driver
# (the SDK) reaches it from the other namespace at https://10.233.0.2:49983, with the door's
# token (STOCKADE_E2B_TOKEN). A test CA signs
# the door's certificate and is made the only trusted root, here only (bind mounts in this
# mount namespace): the system bundle, Python's certifi and Node's extra CAs.
#
# Usage: tls-ns.sh DRIVER_PROGRAM... (the driver and its arguments).
set -euo pipefail
work=$(mktemp -d)
ip link set lo up
# `ip netns` files live on a tmpfs of this mount namespace: nothing is left on the host's /run,
# and parallel runs never share a name.
mkdir -p /run/netns
mount -t tmpfs e2b-netns /run/netns
ip netns add e2bd
ip link add e2bc type veth peer name e2bd netns e2bd
ip addr add 10.233.0.1/24 dev e2bc
ip link set e2bc up
ip netns exec e2bd ip addr add 10.233.0.2/24 dev e2bd
ip netns exec e2bd ip link set e2bd up
ip netns exec e2bd ip link set lo up

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=e2b-test-ca \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=10.233.0.2 \
    -keyout "$work/door.key" -out "$work/door.csr" 2>/dev/null
printf 'subjectAltName=IP:10.233.0.2\nextendedKeyUsage=serverAuth\n' >"$work/ext"
openssl x509 -req -in "$work/door.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -days 2 -extfile "$work/ext" -out "$work/door.pem" 2>/dev/null
chmod 644 "$work/door.key"

for bundle in /etc/ssl/certs/ca-certificates.crt "${E2B_CERTIFI:-}"; do
    if [[ -n $bundle && -f $bundle ]]; then
        mount --bind "$work/ca.pem" "$bundle"
    fi
done
export NODE_EXTRA_CA_CERTS=$work/ca.pem SSL_CERT_FILE=$work/ca.pem
export E2B_SANDBOX_URL=https://10.233.0.2:49983
export STOCKADE_E2B_WRAP="ip netns exec e2bd"
# A door off loopback needs a token: the drivers hand it to the SDK as a platform does.
openssl rand -hex 32 >"$work/token"
chmod 600 "$work/token"
STOCKADE_E2B_TOKEN=$(cat "$work/token")
export STOCKADE_E2B_TOKEN
export STOCKADE_E2B_ARGS="--e2b 10.233.0.2:49983 --token-file $work/token --tls-cert $work/door.pem --tls-key $work/door.key"
exec "$@"
