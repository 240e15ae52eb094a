//! `stockade bench edges --quick` end to end: all ten hard cases in the 0/1 table for each
//! capture variant (`stockade-pipe`, `stockade-file`), each row in JSONL with a reason, the Node
//! baseline's absence said in the table, and nothing the bench started left running.

use std::process::Command;

/// The case ids as `--quick` labels them: the sizes that ran (2 MiB, 3 MiB, 5 s), not the full
/// run's.
const CASES: [&str; 10] = [
    "B4_stdout_4x2MB",
    "C2_stderr_4x2MB",
    "R2_log_stream_4x2MB",
    "B6_small_chunks_3MB",
    "huge_single_line_3MB",
    "slow_stream_5s",
    "no_poll_background",
    "poll_after_spool",
    "kill_while_outputting",
    "disk_cap_edge",
];

/// The variants every case runs on, in table order.
const VARIANTS: [&str; 2] = ["stockade-pipe", "stockade-file"];

#[test]
fn edges_quick_tables_all_ten_cases_and_they_pass() {
    stockade_testkit::stockade_bench_bin(); // `stockade bench` runs it
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .arg("--home")
        .arg(home.path())
        .args(["bench", "edges", "--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(matches!(run.status.code(), Some(0 | 1)), "bench errored: {stdout}\n{stderr}");

    let text = std::fs::read_to_string(out.path().join("edges.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("a JSONL row")).collect();
    let cases: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["variant"].as_str().unwrap(), r["case"].as_str().unwrap()))
        .collect();
    let expected: Vec<(&str, &str)> =
        VARIANTS.iter().flat_map(|v| CASES.iter().map(move |c| (*v, *c))).collect();
    assert_eq!(cases, expected, "a row per case and variant");
    for r in &rows {
        let pass = r["pass"].as_u64().unwrap();
        assert!(pass <= 1, "{r}");
        assert!(!r["reason"].as_str().unwrap().is_empty(), "every row says why: {r}");
        assert!(r["peak_rss_mib"].as_f64().unwrap() > 0.0, "sampled: {r}");
        assert!(out.path().join(r["raw"].as_str().unwrap()).is_file(), "raw samples: {r}");
    }
    let md = std::fs::read_to_string(out.path().join("edges.md")).unwrap();
    for case in CASES {
        for variant in VARIANTS {
            assert!(
                md.lines().any(|l| l.starts_with(&format!("| {case} | {variant} |"))),
                "{case} on {variant} in {md}"
            );
        }
    }
    assert!(md.contains("The Node baseline (`bench growth --node`) is not in this table"), "{md}");
    // What ran and where, and no label of the full run.
    assert!(md.contains("- Ran: 10 cases on stockade-pipe and stockade-file: 4 × 2 MiB per command, 3 MiB single commands, a 5s slow stream, 16 MiB never read"), "{md}");
    assert!(
        md.contains("(`--quick`)") && md.contains("- Machine: ") && md.contains("- Command: `"),
        "{md}"
    );
    assert!(md.contains(&format!("Stockade {} (commit ", env!("CARGO_PKG_VERSION"))), "{md}");
    assert!(!md.contains("20 MiB") && !md.contains("120 s") && !md.contains("200 MiB"), "{md}");
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r["pass"] != 1)
        .map(|r| format!("{}: {}", r["case"], r["reason"]))
        .collect();
    assert!(failed.is_empty(), "hard cases failed:\n{}", failed.join("\n"));
    assert_eq!(run.status.code(), Some(0));
    let left: Vec<_> =
        std::fs::read_dir(home.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "temporary homes left behind: {left:?}");
}
