//! The binary's native dependencies are exactly the ones `docs/deploy.md` lists ("What the
//! binary needs"): the `NEEDED` entries of its dynamic section (`readelf -d`) against the
//! bulleted `lib….so…` names of that section. A new native dependency fails here until the
//! document says what an image must carry. A static build (`+crt-static`, as shipped and as CI
//! builds the tests, `scripts/test-env.sh`) needs nothing: no `NEEDED` entry, no interpreter.

use std::collections::BTreeSet;
use std::process::Command;

use stockade_testkit::{cannot_run, stockade_bin};

use crate::remote_support::repo_root;

/// The "What the binary needs" section of docs/deploy.md.
fn section() -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    let section = doc.split("### What the binary needs").nth(1).expect("the section exists");
    section.split("\n#").next().unwrap().to_owned()
}

/// The bulleted library names of the "What the binary needs" section.
fn documented() -> BTreeSet<String> {
    section()
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| name.contains(".so"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_binary_needs_exactly_the_documented_libraries() {
    if cfg!(not(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))) {
        cannot_run("the documented set is for x86-64 Linux with glibc");
        return;
    }
    let out = match Command::new("readelf").arg("-dW").arg(stockade_bin()).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("readelf failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            cannot_run(&format!(
                "readelf (binutils) is needed to read the binary's NEEDED entries: {e}"
            ));
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: BTreeSet<String> = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next().map(str::to_owned))
        .collect();
    let headers = Command::new("readelf").arg("-lW").arg(stockade_bin()).output().unwrap();
    let headers = String::from_utf8_lossy(&headers.stdout);
    // The binary is built with this test's flags: static if this test binary is.
    if cfg!(target_feature = "crt-static") {
        assert!(needed.is_empty(), "a static build has NEEDED entries: {text}");
        assert!(!headers.contains("program interpreter"), "a static build asks for one: {headers}");
        assert!(
            section().contains("**The shipped binary needs nothing.**"),
            "docs/deploy.md no longer says the static binary needs nothing"
        );
        return;
    }
    assert!(!needed.is_empty(), "no NEEDED entries read: {text}");
    let documented = documented();
    assert_eq!(needed, documented, "the binary's NEEDED entries vs docs/deploy.md");
    assert!(
        headers.contains("[Requesting program interpreter: /lib64/ld-linux-x86-64.so.2]"),
        "{headers}"
    );
}
