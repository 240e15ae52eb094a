//! The `stockade-bench` binary's command line: every measurement is listed, a mistake is a usage
//! error, and redrawing plots needs no `stockade` binary. The measurements themselves run end to
//! end in the `stockade` crate's tests, through `stockade bench`.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stockade-bench"))
        .args(args)
        .output()
        .expect("stockade-bench runs")
}

#[test]
fn help_lists_every_measurement_and_the_binary_it_measures() {
    let out = bench(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for measurement in ["growth", "edges", "drain", "spawn", "memory", "grep", "list", "plot"] {
        assert!(help.contains(&format!("\n  {measurement} ")), "{measurement}: {help}");
    }
    assert!(help.contains("--stockade-bin <FILE>") && help.contains("--home <DIR>"), "{help}");
    assert!(help.contains("Examples:\n  stockade bench growth --quick\n"), "{help}");
}

#[test]
fn an_unknown_measurement_is_a_usage_error() {
    let out = bench(&["speed"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand 'speed'"));
}

#[test]
fn plot_reads_files_only() {
    let out_dir = tempfile::tempdir().unwrap();
    // No `stockade` to be found: plot must not look for one.
    let out = Command::new(env!("CARGO_BIN_EXE_stockade-bench"))
        .args(["plot", "--out"])
        .arg(out_dir.path())
        .env("PATH", "/nonexistent")
        .env_remove("STOCKADE_BIN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("stockade-bench: read ") && stderr.contains("summary.jsonl"),
        "{stderr}"
    );
}
