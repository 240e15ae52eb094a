//! `stockade bench spawn` end to end, small: the real binary, a fresh daemon whose home goes
//! where `--home` says, a temporary `--out`. Every round has its three sides measured (bare,
//! through the daemon, sandboxed), the line names the read rules that hid the home, and no
//! process the bench started is left.

use std::process::Command;

#[test]
fn spawn_measures_three_sides_a_round_and_counts_the_rules_that_hide_the_home() {
    stockade_testkit::stockade_bench_bin();
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .arg("--home")
        .arg(home.path())
        .args(["bench", "spawn", "--rounds", "6", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {stdout}\n{stderr}");
    assert!(stdout.contains("sandboxed (workspace-write, network none)"), "{stdout}");
    let rounds: Vec<serde_json::Value> = std::fs::read_to_string(out.path().join("spawn.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rounds.len(), 6, "{rounds:?}");
    for r in &rounds {
        for side in ["direct_s", "stockade_s", "sandboxed_s"] {
            assert!(r[side].as_f64().unwrap() > 0.0, "{side} not measured: {r}");
        }
    }
    let summary: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(out.path().join("speed.jsonl")).unwrap().lines().last().unwrap(),
    )
    .unwrap();
    let rules = summary["read_rules"].as_u64().unwrap();
    assert!(rules > 0, "{summary}");
    assert!(
        stdout.contains(&format!("hiding the daemon's home with {rules} read rules")),
        "{stdout}"
    );
    // Its home is gone with the daemon, and nothing it started still runs.
    let left: Vec<_> = std::fs::read_dir(home.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    let needle = home.path().display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(!text.contains(&needle), "left running: {text}");
    }
}
