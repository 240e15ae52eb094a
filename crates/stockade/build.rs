//! Records which cargo profile (`release`, `dist`, `dev`, …) and linking built this binary, so
//! `stockade --version` can say it and `stockade bench memory` can report which build it
//! measured: the shipped artefacts (profile `dist`) and a quick local `release` build differ in
//! size and resident memory.

fn main() {
    // Cargo gives build scripts only `PROFILE` = debug|release (a custom profile reads as
    // release); the profile's own name is the directory its artefacts go to:
    // OUT_DIR = <target>[/<triple>]/<profile>/build/<pkg>-<hash>/out.
    let out_dir = std::env::var("OUT_DIR").unwrap_or_default();
    let profile = std::path::Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .map(|n| if n == "debug" { "dev" } else { n })
        .unwrap_or("unknown")
        .to_owned();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let linking = if features.split(',').any(|f| f == "crt-static") { "static" } else { "dynamic" };
    println!("cargo:rustc-env=STOCKADE_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=STOCKADE_BUILD_LINKING={linking}");
    println!("cargo:rerun-if-changed=build.rs");
}
