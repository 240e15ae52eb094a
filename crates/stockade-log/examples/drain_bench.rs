//! Throughput and memory of the pipe-capture path: 1 GiB from `yes` through the shared drain
//! thread (`Drainer`, as the engine drains) into an output log, against the shell writing the same bytes straight to a file.
//!
//! `cargo run --release -p stockade-log --example drain_bench`

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_log::{Drainer, OutputConfig, OutputLog};
use stockade_proto::Stream;

const BYTES: u64 = 1 << 30;

fn engine(dir: &std::path::Path) -> Result<Duration, Box<dyn std::error::Error>> {
    let log = Arc::new(OutputLog::create(
        dir.join("engine"),
        OutputConfig { disk_cap: 2 * BYTES, ..Default::default() },
    )?);
    let start = Instant::now();
    let mut child = Command::new("sh")
        .args(["-c", &format!("yes | head -c {BYTES}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = OwnedFd::from(child.stdout.take().ok_or("no stdout")?);
    let err = OwnedFd::from(child.stderr.take().ok_or("no stderr")?);
    let sources = vec![(Stream::Stdout, out), (Stream::Stderr, err)];
    let summary = Drainer::global()?.add(Arc::clone(&log), sources)?.join()?;
    child.wait()?;
    log.finish()?;
    let elapsed = start.elapsed();
    assert_eq!(summary.bytes, BYTES);
    assert_eq!(log.stats().total_bytes, BYTES);
    println!("engine held_bytes at end: {}", log.held_bytes());
    Ok(elapsed)
}

fn direct(dir: &std::path::Path) -> Result<Duration, Box<dyn std::error::Error>> {
    let file = dir.join("direct.log");
    let start = Instant::now();
    let status = Command::new("sh")
        .args(["-c", &format!("yes | head -c {BYTES} > '{}'", file.display())])
        .status()?;
    let elapsed = start.elapsed();
    assert!(status.success());
    assert_eq!(std::fs::metadata(&file)?.len(), BYTES);
    Ok(elapsed)
}

fn vm_hwm() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    // Alternate, best of 3 each, so page-cache warm-up does not favour one side.
    let (mut best_engine, mut best_direct) = (Duration::MAX, Duration::MAX);
    for round in 0..3 {
        let d = direct(tmp.path())?;
        std::fs::remove_file(tmp.path().join("direct.log"))?;
        let round_dir = tmp.path().join(format!("r{round}"));
        std::fs::create_dir(&round_dir)?;
        let e = engine(&round_dir)?;
        std::fs::remove_dir_all(&round_dir)?;
        println!("round {round}: direct {:.3}s, engine {:.3}s", d.as_secs_f64(), e.as_secs_f64());
        best_direct = best_direct.min(d);
        best_engine = best_engine.min(e);
    }
    let gib_s = |d: Duration| BYTES as f64 / d.as_secs_f64() / f64::from(1 << 30);
    println!(
        "direct (sh > file): {:.3}s ({:.2} GiB/s)",
        best_direct.as_secs_f64(),
        gib_s(best_direct)
    );
    println!(
        "engine (pipe+drain): {:.3}s ({:.2} GiB/s)",
        best_engine.as_secs_f64(),
        gib_s(best_engine)
    );
    println!(
        "ratio engine/direct speed: {:.2}x",
        best_direct.as_secs_f64() / best_engine.as_secs_f64()
    );
    println!("VmHWM: {}", vm_hwm());
    Ok(())
}
