//! The memory invariant holds for PTY sessions too: 20 MiB printed on a terminal, drained by the
//! engine, and the log's memory stays within `LOG_BOOKKEEPING_BYTES` — the same bound as
//! pipes — while every byte reaches the spool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::pty_common::{BOUND, MODES, Run};
use stockade_log::LOG_BOOKKEEPING_BYTES;

const PRINTED: u64 = 20 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mib_on_a_pty_holds_only_bookkeeping() {
    for mode in MODES {
        // No newlines, so the terminal's output processing (\n -> \r\n) adds nothing.
        let command = format!("head -c {PRINTED} /dev/zero | tr '\\0' X");
        let run =
            Run::pty(mode, "mem", "sh", &["-c", &command], &[], crate::pty_common::default_size());
        let bound = LOG_BOOKKEEPING_BYTES;
        let done = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (log, done, peak) = (run.log.clone(), done.clone(), peak.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(log.held_bytes(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(500));
                }
            })
        };
        let exit = tokio::time::timeout(BOUND, run.tree.wait_root()).await;
        done.store(true, Ordering::Relaxed);
        sampler.join().unwrap();
        assert_eq!(exit.expect("the producer did not finish").unwrap().code, Some(0));
        let summary = run.wait_drained();
        let s = run.log.stats();
        assert_eq!((summary.bytes, s.total_bytes, s.stream_bytes.pty), (PRINTED, PRINTED, PRINTED));
        assert_eq!(s.dropped_bytes, 0);
        assert_eq!(std::fs::metadata(run.log.spool_path()).unwrap().len(), PRINTED);
        let peak = peak.load(Ordering::Relaxed).max(run.log.held_bytes());
        assert!(peak <= bound, "held {peak} bytes, bound {bound}");
        // Every byte went to the spool; none is kept in memory.
        assert_eq!(s.hot_tail_bytes, 0);
        run.terminate_and_verify().await;
    }
}
