//! `stockade bench growth --quick` end to end: the real binary, fresh daemons in a temporary
//! `--home`, a temporary `--out`; the raw JSONL, the summary and the SVGs exist and parse, and no
//! process the bench started is left.

use std::path::Path;
use std::process::Command;

/// `stockade`, whose `bench` runs the `stockade-bench` binary beside it (which must be built).
pub(crate) fn stockade() -> Command {
    stockade_testkit::stockade_bench_bin();
    Command::new(env!("CARGO_BIN_EXE_stockade"))
}

/// `stockade --home HOME bench ARGS… --out OUT`, which must succeed: its standard output.
pub(crate) fn bench_ok(home: &Path, out: &Path, args: &[&str]) -> String {
    let run = stockade()
        .arg("--home")
        .arg(home)
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {stdout}\n{stderr}");
    stdout
}

/// Processes whose command line mentions `dir` (the daemons and every session's command do).
pub(crate) fn processes_mentioning(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(&needle) {
            found.push(format!("{name}: {text}"));
        }
    }
    found
}

pub(crate) fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).expect("a JSONL row")).collect()
}

#[test]
fn growth_quick_writes_raw_samples_summary_and_plots_and_leaves_nothing_running() {
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let args = ["growth", "--quick", "--variants", "pipe,file", "--concurrency", "1,2"];
    bench_ok(home.path(), out.path(), &[&args[..], &["--bytes", "1MiB", "--sleep", "0"]].concat());

    let rows = jsonl(&out.path().join("summary.jsonl"));
    assert_eq!(rows.len(), 4, "one row per variant × N: {rows:?}");
    for r in &rows {
        for field in [
            "variant",
            "n",
            "bytes_each",
            "rows",
            "duration_s",
            "baseline_rss_mib",
            "peak_rss_mib",
            "final_rss_mib",
            "total_output_mib",
            "delta_rss_per_output_mib",
            "oom",
            "exit",
        ] {
            assert!(r.get(field).is_some(), "summary row without {field}: {r}");
        }
        assert_eq!(r["oom"], false, "{r}");
        assert_eq!(r["exit"], "0", "the daemon shut down cleanly: {r}");
        assert!(r["rows"].as_u64().unwrap() >= 5, "sampled every 100 ms: {r}");
        let n = r["n"].as_f64().unwrap();
        assert_eq!(r["total_output_mib"].as_f64().unwrap(), n, "every byte counted: {r}");
        let raw = jsonl(&out.path().join(r["raw"].as_str().unwrap()));
        assert!(raw.iter().any(|s| s["t_ms"].as_i64().unwrap() < 0), "baseline before release");
        for s in &raw {
            for field in ["unix_ms", "t_ms", "alive", "rss_bytes", "peak_rss_bytes"] {
                assert!(s.get(field).is_some(), "raw row without {field}: {s}");
            }
        }
        assert!(raw.iter().any(|s| s.get("allocated_bytes").is_some()), "stats sampled");
        assert!(raw.iter().any(|s| s.get("hot_tail_bytes").is_some()), "stats sampled");
    }
    assert!(out.path().join("raw/stockade-pipe").is_dir());
    assert!(out.path().join("raw/stockade-file").is_dir());
    let md = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(md.contains("| stockade-pipe | 2 | 1 MiB |"), "{md}");
    // The summary says what really ran (the --quick default would be 4 MiB; 1 MiB was asked
    // for) and records the version, commit, date, machine and exact command line.
    assert!(md.contains("- Ran: N = 1, 2; 1 MiB each; variants stockade-pipe, stockade-file; 0 s sleep after printing (`--quick`)"), "{md}");
    assert!(md.contains(&format!("- Stockade {} (commit ", env!("CARGO_PKG_VERSION"))), "{md}");
    let machine = md.lines().find(|l| l.starts_with("- Machine: ")).expect("a machine line");
    assert!(machine.contains(" cores (") && machine.contains("GiB memory, Linux "), "{machine}");
    let command = md.lines().find(|l| l.starts_with("- Command: `")).expect("a command line");
    assert!(command.contains("bench growth --quick --variants pipe,file --concurrency 1,2 --bytes 1MiB --sleep 0 --out "), "{command}");
    assert!(!md.contains("20 MiB"), "no label of the full run: {md}");
    for r in &rows {
        assert_eq!(r["meta"]["quick"], true, "{r}");
        assert!(r["meta"]["date"].as_str().unwrap().ends_with('Z'), "{r}");
    }
    for svg in [
        "time-rss-1MiB.svg",
        "time-output-1MiB.svg",
        "concurrency-peak-rss.svg",
        "output-delta-rss.svg",
    ] {
        let text =
            std::fs::read_to_string(out.path().join(svg)).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert!(
            text.starts_with("<svg") && text.contains("Georgia"),
            "{svg} is an SVG in the report style"
        );
    }
    // The spools were deleted with each run's temporary home.
    let left: Vec<_> =
        std::fs::read_dir(home.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "temporary homes left behind: {left:?}");
    assert_eq!(processes_mentioning(home.path()), Vec::<String>::new(), "processes left running");
}

#[test]
fn a_peer_is_measured_through_the_peer_contract() {
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // A minimal peer in shell: start BENCH_N commands, say ready, wait for them, count nothing.
    let peer = "shell-peer=/bin/sh -c 'i=0; while [ $i -lt $BENCH_N ]; do /bin/sh -c \"$BENCH_COMMAND\" >/dev/null & i=$((i+1)); done; echo ready; wait'";
    let args = ["growth", "--variants", "", "--peer", peer, "--concurrency", "2"];
    bench_ok(home.path(), out.path(), &[&args[..], &["--bytes", "1MiB", "--sleep", "0"]].concat());
    let rows = jsonl(&out.path().join("summary.jsonl"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["variant"], "shell-peer");
    assert_eq!(rows[0]["exit"], "0", "{}", rows[0]);
    assert_eq!(rows[0]["output_counted"], false, "a peer without a progress file is not counted");
    assert!(rows[0]["peak_rss_mib"].as_f64().unwrap() > 0.0);
    assert_eq!(processes_mentioning(home.path()), Vec::<String>::new(), "processes left running");
}
