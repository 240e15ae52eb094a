# Sourced by .ci/run and scripts/test: every cargo command of CI (clippy, the docs, the test
# build, the artefacts) compiles for one target with one set of flags, so the dependency graph
# is compiled once for the tests and the artefacts alike: the static binary's RUSTFLAGS
# (scripts/static-rustflags.sh) and its explicit --target, which keeps build scripts and
# proc-macros dynamic. The test binaries and the `stockade` they drive are then static PIEs, as
# shipped; their output is under target/x86_64-unknown-linux-gnu/debug/.
. scripts/static-rustflags.sh
export CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu
