//! Builds the tiny session keeper (`keeper/keeper.rs`, x86_64 Linux only) into
//! `$OUT_DIR/keeper`: one `$RUSTC` invocation on that single `no_std` file, linked static with
//! no start files and no libc. `src/keeper.rs` embeds the result. On another target nothing is
//! built and the crate falls back to a keeper running in the daemon's own executable.

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "keeper/keeper.rs";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ARCH") != "x86_64" {
        return;
    }
    let out = PathBuf::from(var("OUT_DIR")).join("keeper");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(&rustc);
    cmd.arg("--edition=2024")
        .args(["--crate-type", "bin", "--crate-name", "stockade_keeper"])
        .args(["--target", &var("TARGET")])
        .args(["-C", "panic=abort", "-C", "opt-level=s", "-C", "relocation-model=static"])
        .args(["-C", "target-feature=+crt-static", "-C", "strip=symbols"])
        .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib"])
        .args(["-C", "link-arg=-static", "-C", "link-arg=-Wl,--build-id=none"])
        .arg("-o")
        .arg(&out)
        .arg(PathBuf::from(var("CARGO_MANIFEST_DIR")).join(SOURCE));
    // The linker cargo was told to use for this target, if any.
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={}", linker.to_string_lossy()));
    }
    match cmd.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "building the tiny session keeper failed ({status}): {cmd:?}\n\
             It needs a linker able to link a static executable without libc (cc, as for any \
             Rust binary); see the errors above."
        ),
        Err(e) => panic!("cannot run {rustc:?} to build the tiny session keeper: {e}"),
    }
}
