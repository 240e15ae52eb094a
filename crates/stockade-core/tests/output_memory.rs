//! The memory invariant: a log's memory is bounded by its retained cap, never by what the
//! command printed.

#![allow(clippy::unwrap_used)]

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use stockade_core::output::{DrainCancel, LOG_BOOKKEEPING_BYTES, OutputConfig, OutputLog, drain};
use stockade_proto::Stream;

/// Kills and reaps the child's whole process group on drop, even when the test fails.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // SAFETY: plain syscall on the group this test created (pgid == child pid).
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

const PRINTED: u64 = 512 * 1024 * 1024;

#[test]
fn memory_is_bounded_by_the_retained_cap_not_by_output() {
    let t = tempfile::tempdir().unwrap();
    let config = OutputConfig::default();
    let bound = config.retained_cap + LOG_BOOKKEEPING_BYTES;
    let log = Arc::new(OutputLog::create(t.path().join("sh-1"), config).unwrap());
    let mut child = ChildGuard(
        Command::new("sh")
            .args(["-c", &format!("yes | head -c {PRINTED}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let sources = vec![
        (Stream::Stdout, OwnedFd::from(child.0.stdout.take().unwrap())),
        (Stream::Stderr, OwnedFd::from(child.0.stderr.take().unwrap())),
    ];
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (log, done, peak, samples) = (log.clone(), done.clone(), peak.clone(), samples.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(log.held_bytes(), Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let summary = drain(&log, sources, &DrainCancel::new().unwrap());
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let summary = summary.unwrap();
    assert!(child.0.wait().unwrap().success());
    log.finish().unwrap();

    let s = log.stats();
    assert_eq!((summary.bytes, s.total_bytes, s.stream_bytes.stdout), (PRINTED, PRINTED, PRINTED));
    assert_eq!((s.newlines, s.dropped_bytes), (PRINTED / 2, 0));
    assert_eq!(std::fs::metadata(log.spool_path()).unwrap().len(), PRINTED);
    assert!(samples.load(Ordering::Relaxed) > 10);
    let peak = peak.load(Ordering::Relaxed).max(log.held_bytes());
    assert!(peak <= bound, "held {peak} bytes, bound {bound}");
    // The ring did fill up: the bound is tight, not vacuous.
    assert_eq!(s.hot_tail_bytes, log.config().retained_cap as u64);
    assert!(log.held_bytes() >= log.config().retained_cap);
}
