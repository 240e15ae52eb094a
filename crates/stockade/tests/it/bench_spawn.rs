//! `stockade bench spawn` end to end, small: the real binary, a fresh daemon whose home goes
//! where `--home` says, a temporary `--out`. Every round has its three sides measured (bare,
//! through the daemon, sandboxed), the line names the read rules that hid the home, and no
//! process the bench started is left.

use crate::bench_growth::{bench_ok, jsonl, processes_mentioning};

#[test]
fn spawn_measures_three_sides_a_round_and_counts_the_rules_that_hide_the_home() {
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let stdout = bench_ok(home.path(), out.path(), &["spawn", "--rounds", "6"]);
    assert!(stdout.contains("sandboxed (workspace-write, network none)"), "{stdout}");
    let rounds = jsonl(&out.path().join("spawn.jsonl"));
    assert_eq!(rounds.len(), 6, "{rounds:?}");
    for r in &rounds {
        for side in ["direct_s", "stockade_s", "sandboxed_s"] {
            assert!(r[side].as_f64().unwrap() > 0.0, "{side} not measured: {r}");
        }
    }
    let summary = jsonl(&out.path().join("speed.jsonl")).pop().unwrap();
    let rules = summary["read_rules"].as_u64().unwrap();
    assert!(rules > 0, "{summary}");
    let said = format!("hiding the daemon's home with {rules} read rules");
    assert!(stdout.contains(&said), "{stdout}");
    // Its home is gone with the daemon, and nothing it started still runs.
    let left: Vec<_> = std::fs::read_dir(home.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(processes_mentioning(home.path()), Vec::<String>::new(), "processes left running");
}
