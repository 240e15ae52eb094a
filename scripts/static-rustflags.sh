# Sourced by scripts/build-static and scripts/build-artifacts: the RUSTFLAGS of the static binary.
# `+crt-static` links glibc in as a static PIE. In a static binary `dlsym` finds nothing, so the
# `getrandom` crate would fall back to reading /dev/urandom (and fail where there is no /dev, as
# in a bare chroot or a scratch image): its `linux_getrandom` backend calls getrandom(2) directly.
# Both scripts use the same flags, so maturin finds the static build fresh instead of compiling
# again.
export RUSTFLAGS='-C target-feature=+crt-static --cfg getrandom_backend="linux_getrandom"'
