//! How long `terminate` takes from the call to verified-gone, per process shape and containment
//! method: 20 runs each, p50 and max.
//!
//! `cargo run --release -p stockade-proc --example terminate_timing [-- --grace-ms N --runs N]`
//!
//! Shapes that die on SIGTERM finish in a few polls; the `trap '' TERM` shape is bounded by the
//! grace period (SIGKILL follows it), so it is shown with the grace used.

use std::time::{Duration, Instant};

use stockade_proc::{
    CgroupMode, Containment, ContainmentConfig, SessionMarker, SpawnSpec, TerminateOptions, spawn,
};
use stockade_proto::{ContainmentMethod, DEFAULT_GRACE_MS};

/// Runs per shape and method unless `--runs` says otherwise.
const DEFAULT_RUNS: usize = 20;
/// Upper bound on waiting for a shape to form before timing its termination.
const SHAPE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the shape's members are polled while it forms.
const SHAPE_POLL: Duration = Duration::from_millis(5);

/// (name, command, processes to wait for before terminating)
const SHAPES: &[(&str, &str, usize)] = &[
    ("sleep", "sleep 1000", 1),
    ("pipeline", "yes | head -c 1G | sleep 1000", 4),
    ("nested timeout", "timeout 180s sh -c 'yes | head -c 1G > /dev/null; sleep 1000'", 3),
    ("background &", "sleep 1000 & wait", 2),
    ("setsid escape", "setsid sleep 1000 & wait", 2),
    ("double fork", "(sleep 1000 &) & exec sleep 1000", 2),
    ("nohup", "nohup sleep 1000 & wait", 2),
    ("trap '' TERM", "trap '' TERM; sleep 1000 & wait", 2),
];

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(idx).copied().unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let grace = Duration::from_millis(arg("--grace-ms").unwrap_or(DEFAULT_GRACE_MS));
    let runs = arg("--runs").map_or(DEFAULT_RUNS, |r| r as usize);
    let methods = [CgroupMode::Auto, CgroupMode::Off];
    let instance = format!("timing-{}", std::process::id());

    println!(
        "grace {} ms, {runs} runs per cell, times from terminate() to verified-gone",
        grace.as_millis()
    );
    println!(
        "{:<16} {:<14} {:>9} {:>9} {:>10} {:>9}",
        "shape", "method", "p50 ms", "max ms", "escalated", "failures"
    );
    let mut seq = 0u32;
    for (shape, command, procs) in SHAPES {
        for mode in &methods {
            let containment = Containment::detect(&ContainmentConfig {
                cgroup: mode.clone(),
                subreaper: true,
                keeper: None,
                keeper_with_cgroup: false,
            });
            let method = match containment.method() {
                ContainmentMethod::Cgroup => "cgroup",
                ContainmentMethod::ProcessGroup => "process-group",
            };
            let mut times = Vec::with_capacity(runs);
            let mut escalated = 0;
            let mut failures = 0;
            for _ in 0..runs {
                seq += 1;
                let marker = SessionMarker::new(&instance, format!("t{seq}"));
                let tree = spawn(SpawnSpec::shell(command, marker), &containment)?.tree;
                let deadline = Instant::now() + SHAPE_TIMEOUT;
                while tree.members().len() < *procs && Instant::now() < deadline {
                    tokio::time::sleep(SHAPE_POLL).await;
                }
                let opts = TerminateOptions { grace, ..TerminateOptions::default() };
                let started = Instant::now();
                let report = tree.terminate(&opts).await;
                times.push(started.elapsed());
                escalated += usize::from(report.escalated);
                if !report.terminated || !tree.members().is_empty() {
                    failures += 1;
                }
            }
            times.sort();
            println!(
                "{:<16} {:<14} {:>9.1} {:>9.1} {:>10} {:>9}",
                shape,
                method,
                percentile(&times, 0.5).as_secs_f64() * 1e3,
                times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
                format!("{escalated}/{runs}"),
                failures
            );
        }
    }
    Ok(())
}
