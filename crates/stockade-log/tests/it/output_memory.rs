//! The memory invariant: a log holds only bookkeeping while its spool takes every byte (reads
//! go to the spool), at most its retained cap after the spool stopped, never what the command
//! printed; a `file`-capture log and a finished log hold only bookkeeping and no descriptor.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use stockade_log::{GrepRequest, LOG_BOOKKEEPING_BYTES, OutputConfig, OutputLog, ReadRequest};
use stockade_proto::{Capture, DiskPolicy, OutputLimits, ReadMode, Stream};

use crate::drain_to_end;

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
fn a_running_log_holds_only_bookkeeping_however_much_is_printed() {
    let t = tempfile::tempdir().unwrap();
    let config = OutputConfig::default();
    let bound = LOG_BOOKKEEPING_BYTES;
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
    let summary = drain_to_end(&log, sources);
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let summary = summary.unwrap();
    assert!(child.0.wait().unwrap().success());
    // Every byte is in the spool, none in memory.
    assert_eq!(log.stats().hot_tail_bytes, 0);
    assert!(log.holds_files(), "a log being written keeps its files");
    let peak = peak.load(Ordering::Relaxed).max(log.held_bytes());
    log.finish().unwrap();

    let s = log.stats();
    assert_eq!((summary.bytes, s.total_bytes, s.stream_bytes.stdout), (PRINTED, PRINTED, PRINTED));
    assert_eq!((s.newlines, s.dropped_bytes), (PRINTED / 2, 0));
    assert_eq!(std::fs::metadata(log.spool_path()).unwrap().len(), PRINTED);
    assert!(samples.load(Ordering::Relaxed) > 10);
    assert!(peak <= bound, "held {peak} bytes, bound {bound}");
    // A finished log holds no output bytes: the ring is released, reads go to the spool.
    assert_eq!(s.hot_tail_bytes, 0);
    assert!(log.held_bytes() <= LOG_BOOKKEEPING_BYTES, "held {} after finish", log.held_bytes());
    assert!(!log.holds_files(), "a finished log holds no descriptor");
}

const FILE_PRINTED: u64 = 64 * 1024 * 1024;

#[test]
fn file_capture_holds_only_bookkeeping_and_reads_by_offset() {
    let t = tempfile::tempdir().unwrap();
    let config = OutputConfig { capture: Capture::File, ..Default::default() };
    let log = OutputLog::create(t.path().join("sh-1"), config).unwrap();
    let fd = log.child_fd().unwrap();
    let mut child = ChildGuard(
        Command::new("sh")
            .args(["-c", &format!("yes | head -c {FILE_PRINTED}")])
            .stdout(Stdio::from(fd.try_clone().unwrap()))
            .stderr(Stdio::from(fd))
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    // Sync while the child writes (as the supervisor does every 100 ms), sampling the memory.
    let mut peak = log.held_bytes();
    let mut syncs = 0;
    loop {
        let exited = child.0.try_wait().unwrap().is_some();
        log.sync_from_file().unwrap();
        peak = peak.max(log.held_bytes());
        syncs += 1;
        if exited {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(child.0.wait().unwrap().success());
    let s = log.stats();
    assert_eq!((s.total_bytes, s.stream_bytes.combined), (FILE_PRINTED, FILE_PRINTED));
    assert_eq!(
        (s.newlines, s.total_lines, s.hot_tail_bytes),
        (FILE_PRINTED / 2, FILE_PRINTED / 2, 0)
    );
    assert!(syncs > 1);
    assert!(peak <= LOG_BOOKKEEPING_BYTES, "file capture held {peak} bytes");

    // Every read is served from the spool by offset, bounded by the request.
    let tail = log.read(&view(ReadMode::Tail, 1000, 3)).unwrap();
    assert!(tail.truncated && tail.output == "y\ny\ny\n" && tail.notice.is_some(), "{tail:?}");
    assert_eq!(tail.total_bytes, FILE_PRINTED);
    let head = log.read(&view(ReadMode::Head, 10, 100)).unwrap();
    assert!(head.output.starts_with("y\ny\ny\ny\ny\n") && head.next_cursor == 10);
    let delta = log
        .read(&ReadRequest { after: FILE_PRINTED - 4, ..view(ReadMode::Delta, 1 << 20, 100) })
        .unwrap();
    assert_eq!((delta.output.as_str(), delta.next_cursor), ("y\ny\n", FILE_PRINTED));
    let (raw, next) = log.read_raw(FILE_PRINTED / 2 + 1, 5).unwrap();
    assert_eq!((raw.as_slice(), next), (&b"\ny\ny\n"[..5], FILE_PRINTED / 2 + 6));
    assert!(log.held_bytes() <= LOG_BOOKKEEPING_BYTES);
    log.finish().unwrap();
    assert!(log.held_bytes() <= LOG_BOOKKEEPING_BYTES);
    assert_eq!(log.read(&view(ReadMode::Tail, 1000, 3)).unwrap(), tail);
}

fn view(mode: ReadMode, max_bytes: usize, max_lines: usize) -> ReadRequest {
    ReadRequest { mode, limits: OutputLimits { max_bytes, max_lines }, ..Default::default() }
}

/// Every kind of read, at a few cursors, with and without a stream filter.
fn every_read(log: &OutputLog) -> Vec<String> {
    let total = log.stats().total_bytes;
    let mut out = Vec::new();
    for stream in [None, Some(Stream::Stdout), Some(Stream::Stderr)] {
        for mode in [ReadMode::Tail, ReadMode::Head, ReadMode::Middle, ReadMode::Delta] {
            for (max_bytes, max_lines) in [(300, 2000), (1 << 20, 7), (1 << 20, 1_000_000)] {
                for after in [0, 1, total / 3, total - total / 50, total - 3, total] {
                    let r = ReadRequest { after, stream, ..view(mode, max_bytes, max_lines) };
                    out.push(format!("{:?}", log.read(&r).unwrap()));
                }
            }
        }
    }
    for after in [0, 7, total / 2, total - total / 50, total - 1, total] {
        out.push(format!("{:?}", log.read_raw(after, 5000).unwrap()));
    }
    let g = GrepRequest { pattern: "(out|err) 1[0-9]*7$".into(), context: 1, ..Default::default() };
    out.push(format!("{:?}", log.grep(&g).unwrap()));
    out
}

#[test]
fn finish_releases_the_ring_and_every_read_answers_the_same() {
    let cases = [
        ("pipe", OutputConfig { retained_cap: 8192, ..Default::default() }),
        (
            "keep-head-tail",
            OutputConfig {
                retained_cap: 8192,
                disk_cap: 20_000,
                disk_policy: DiskPolicy::KeepHeadTail,
                ..Default::default()
            },
        ),
    ];
    for (name, config) in cases {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sh-1");
        let log = OutputLog::create(&dir, config).unwrap();
        for i in 0..3000 {
            log.append(Stream::Stdout, format!("out {i}\n").as_bytes()).unwrap();
            if i % 3 == 0 {
                log.append(Stream::Stderr, format!("err {i}\n").as_bytes()).unwrap();
            }
        }
        if config_keeps_tail(&log) {
            assert!(log.held_bytes() >= 8192, "{name}: the ring filled after the spool stopped");
        } else {
            assert!(log.held_bytes() <= LOG_BOOKKEEPING_BYTES, "{name}: no ring while spooling");
        }
        let before = every_read(&log);
        log.finish().unwrap();
        let held = log.held_bytes();
        assert!(held <= LOG_BOOKKEEPING_BYTES, "{name}: {held} bytes held after finish");
        assert_eq!(log.stats().hot_tail_bytes, 0, "{name}");
        let after = every_read(&log);
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b, a, "{name}: a read changed after finish");
        }
        // And a re-opened log answers the same too.
        assert_eq!(every_read(&OutputLog::open(&dir).unwrap()), after, "{name}: re-opened");
    }
}

/// Whether the log's spool stopped under `keep-head-tail`, the one case a running log keeps
/// output in memory.
fn config_keeps_tail(log: &OutputLog) -> bool {
    log.config().disk_policy == DiskPolicy::KeepHeadTail && log.cap_reached().is_some()
}
