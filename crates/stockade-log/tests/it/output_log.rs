//! The output log seen from outside: cursors, views, streams, gaps, symlinks, capture modes.

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use stockade_log::answer;
use stockade_log::{
    AppendOutcome, Drainer, GrepRequest, OutputConfig, OutputError, OutputLog, ReadRequest,
};
use stockade_proto::{Capture, DiskPolicy, Gap, OutputLimits, OutputView, ReadMode, Stream};

use crate::drain_to_end;

/// Kills and reaps the child's whole process group on drop, even when the test fails.
struct ChildGuard(Child);

impl ChildGuard {
    fn spawn(cmd: &mut Command) -> ChildGuard {
        ChildGuard(cmd.process_group(0).spawn().unwrap())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // SAFETY: plain syscall on the group this test created (pgid == child pid).
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

fn new_log(cfg: OutputConfig) -> (tempfile::TempDir, OutputLog) {
    let t = tempfile::tempdir().unwrap();
    let l = OutputLog::create(t.path().join("sh-1"), cfg).unwrap();
    (t, l)
}

fn small(retained_cap: usize) -> OutputConfig {
    OutputConfig { retained_cap, ..Default::default() }
}

fn req(mode: ReadMode, max_bytes: usize, max_lines: usize) -> ReadRequest {
    ReadRequest { mode, limits: OutputLimits { max_bytes, max_lines }, ..Default::default() }
}

fn numbered_lines(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| format!("line {i:05}\n").into_bytes()).collect()
}

/// The content part of a view (the notice is beside it, in `notice`).
fn content(v: &OutputView) -> &str {
    &v.output
}

/// A view as the CLI prints it: content, then the notice naming `label`'s read and grep.
fn labelled(v: &OutputView, label: Option<&str>) -> String {
    answer::view_text(v, |after| {
        label.map(|l| format!("stockade read {l} --after {after}, or stockade grep {l} REGEX"))
    })
}

/// The text a door shows for a view of `sh-1` (what `max_bytes` bounds).
fn text(v: &OutputView) -> String {
    labelled(v, Some("sh-1"))
}

#[test]
fn cursor_reads_across_the_hot_tail_boundary_match_the_spool() {
    let (_t, log) = new_log(small(4096));
    let data = numbered_lines(20_000);
    let mut pos = 0;
    for (i, size) in [1usize, 7, 300, 4095, 4096, 4097, 9000, 33].iter().cycle().enumerate() {
        if pos >= data.len() {
            break;
        }
        let end = (pos + size).min(data.len());
        let stream = if i % 3 == 0 { Stream::Stderr } else { Stream::Stdout };
        assert_eq!(log.append(stream, &data[pos..end]).unwrap(), AppendOutcome::Written);
        pos = end;
    }
    let spool = std::fs::read(log.spool_path()).unwrap();
    assert_eq!(spool, data);
    // Raw reads of every size straddle the ring start (data.len() - 4096).
    for max in [1usize, 999, 4096, 70_000] {
        let mut got = Vec::new();
        let mut cursor = 0;
        while cursor < data.len() as u64 {
            let (bytes, next) = log.read_raw(cursor, max).unwrap();
            assert!(bytes.len() <= max);
            assert_eq!(next, cursor + bytes.len() as u64);
            got.extend_from_slice(&bytes);
            cursor = next;
        }
        assert_eq!(got, spool);
    }
    // Delta reads: each answer's content is exactly the spool's bytes between the cursors.
    let mut cursor = 0;
    let mut reads = 0;
    while cursor < data.len() as u64 {
        let v =
            log.read(&ReadRequest { after: cursor, ..req(ReadMode::Delta, 8000, 2000) }).unwrap();
        assert_eq!(v.start_cursor, cursor);
        assert!(text(&v).len() <= 8000);
        assert_eq!(content(&v).as_bytes(), &spool[cursor as usize..v.next_cursor as usize]);
        assert!(v.next_cursor > cursor);
        cursor = v.next_cursor;
        reads += 1;
    }
    assert!(reads > 20);
    // A cursor at the end: nothing new, not truncated.
    let v = log.read(&ReadRequest { after: cursor, ..Default::default() }).unwrap();
    assert_eq!((v.output.as_str(), v.truncated, v.next_cursor), ("", false, cursor));
}

#[test]
fn every_truncation_mode_is_bounded_and_says_what_was_cut() {
    let (_t, log) = new_log(small(8192));
    let data = numbered_lines(10_000); // 110,000 bytes, 11 per line
    log.append(Stream::Stdout, &data).unwrap();
    let max = 50 * 1024;

    let tail = log.read(&req(ReadMode::Tail, max, 2000)).unwrap();
    assert!(tail.truncated && text(&tail).len() <= max);
    let shown = content(&tail);
    assert!(shown.ends_with("line 09999\n") && shown.starts_with("line "));
    let shown_lines = shown.lines().count() as u64;
    assert_eq!(shown_lines, 2000.min(shown.len() as u64 / 11));
    assert_eq!(tail.omitted_lines, Some(10_000 - shown_lines));
    assert_eq!(tail.omitted_bytes, 110_000 - shown.len() as u64);
    assert_eq!(tail.start_cursor, 110_000 - shown.len() as u64);
    assert_eq!((tail.total_bytes, tail.total_lines, tail.next_cursor), (110_000, 10_000, 110_000));
    let notice = format!(
        "[… {} bytes / {} lines omitted. Full output: {}. Read more: stockade read sh-3 --after 0, or stockade grep sh-3 REGEX]",
        thousands(tail.omitted_bytes),
        thousands(10_000 - shown_lines),
        log.spool_path().display()
    );
    let shown_text = labelled(&tail, Some("sh-3"));
    assert!(shown_text.ends_with(&notice), "{}", &shown_text[shown_text.len() - 300..]);

    let head = log.read(&req(ReadMode::Head, max, 100)).unwrap();
    let shown = content(&head);
    assert_eq!(shown.as_bytes(), &data[..1100]);
    assert_eq!(
        (head.next_cursor, head.omitted_lines, head.omitted_bytes),
        (1100, Some(9900), 108_900)
    );
    let head_text = labelled(&head, None);
    assert!(head_text.ends_with(&format!("Full output: {}]", log.spool_path().display())));

    let tail10 = log.read(&req(ReadMode::Tail, max, 10)).unwrap();
    assert_eq!(content(&tail10).as_bytes(), &data[data.len() - 110..]);

    let middle = log.read(&req(ReadMode::Middle, max, 10)).unwrap();
    let expected = format!(
        "{}[… {} bytes / 9,990 lines omitted …]\n{}",
        std::str::from_utf8(&data[..55]).unwrap(),
        thousands(110_000 - 110),
        std::str::from_utf8(&data[data.len() - 55..]).unwrap()
    );
    assert!(middle.output.starts_with(&expected), "{}", middle.output);
    assert!(middle.truncated && text(&middle).len() <= max);

    let middle_bytes = log.read(&req(ReadMode::Middle, 4000, 100_000)).unwrap();
    assert!(text(&middle_bytes).len() <= 4000 && middle_bytes.output.starts_with("line 00000\n"));
    assert!(content(&middle_bytes).ends_with("line 09999\n"));

    // Everything fits: shown whole, no notice.
    let all = log.read(&req(ReadMode::Tail, 200_000, 20_000)).unwrap();
    assert_eq!((all.output.as_bytes(), all.truncated), (&data[..], false));
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn cuts_never_split_a_multibyte_character() {
    let (_t, log) = new_log(small(1000));
    // 3-byte and 4-byte characters, no newline anywhere: only char boundaries to cut on.
    let chars = "€😀".repeat(2000);
    for chunk in chars.as_bytes().chunks(333) {
        log.append(Stream::Stdout, chunk).unwrap();
    }
    for mode in [ReadMode::Head, ReadMode::Tail, ReadMode::Middle, ReadMode::Delta] {
        for max in [700usize, 1001, 1002, 1003, 5000] {
            let v = log.read(&req(mode, max, 2000)).unwrap();
            assert!(v.truncated);
            assert!(text(&v).len() <= max, "{mode:?} {max}");
            assert!(!v.output.contains("\\x"), "{mode:?} {max}: an escaped byte in {}", v.output);
            let shown: String = content(&v).lines().filter(|l| !l.starts_with("[…")).collect();
            assert!(
                shown.chars().all(|c| c == '€' || c == '😀' || !c.is_alphanumeric()),
                "{mode:?}"
            );
            assert!(!content(&v).is_empty());
        }
    }
    // A delta continuation lands on a boundary too.
    let v = log.read(&req(ReadMode::Delta, 1000, 2000)).unwrap();
    let next = log
        .read(&ReadRequest { after: v.next_cursor, ..req(ReadMode::Delta, 1000, 2000) })
        .unwrap();
    assert!(!next.output.contains("\\x"));
}

#[test]
fn a_30_mib_single_line_is_read_in_bounded_pieces() {
    let (_t, log) = new_log(OutputConfig::default());
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..480 {
        log.append(Stream::Stdout, &chunk).unwrap();
    }
    let s = log.stats();
    assert_eq!((s.total_bytes, s.total_lines, s.last_line_incomplete), (30 << 20, 1, true));
    for mode in [ReadMode::Tail, ReadMode::Head, ReadMode::Middle, ReadMode::Delta] {
        let v = log.read(&req(mode, 50 * 1024, 2000)).unwrap();
        assert!(v.truncated && text(&v).len() <= 50 * 1024);
        assert!(
            content(&v).bytes().filter(|&b| b != b'\n').all(|b| b == b'x')
                || mode == ReadMode::Middle
        );
        assert!(content(&v).len() > 40 * 1024 / if mode == ReadMode::Middle { 2 } else { 1 });
    }
    log.finish().unwrap();
    let g = log.grep(&GrepRequest { pattern: "x+$".into(), ..Default::default() }).unwrap();
    assert_eq!(g.matches, 1);
    assert_eq!((g.lines[0].line_number, g.lines[0].offset), (1, 0));
    assert!(g.lines[0].text.len() <= 1024 + 3 && g.lines[0].text.ends_with('…'));
}

#[test]
fn invalid_utf8_is_shown_lossily_and_kept_raw() {
    let (_t, log) = new_log(OutputConfig::default());
    log.append(Stream::Stdout, b"ok\xff\xfe\nend\n").unwrap();
    let v = log.read(&ReadRequest { mode: ReadMode::Tail, ..Default::default() }).unwrap();
    // Each invalid byte is spelled `\xNN`: visible, and which byte it was.
    assert_eq!(v.output, "ok\\xff\\xfe\nend\n");
    assert_eq!(log.read_raw(0, 100).unwrap(), (b"ok\xff\xfe\nend\n".to_vec(), 9));
    // Invalid bytes expand when shown; the answer still respects max_bytes.
    let (_t2, log) = new_log(OutputConfig::default());
    log.append(Stream::Stdout, &vec![0xff; 100_000]).unwrap();
    let v = log.read(&req(ReadMode::Tail, 4000, 10)).unwrap();
    assert!(v.truncated && text(&v).len() <= 4000 && v.output.starts_with("\\xff"), "{}", v.output);
}

fn interleaved(log: &OutputLog, n: usize) {
    for i in 0..n {
        log.append(Stream::Stdout, format!("out {i}\n").as_bytes()).unwrap();
        log.append(Stream::Stderr, format!("err {i}\n").as_bytes()).unwrap();
    }
}

fn expected_stream(prefix: &str, range: std::ops::Range<usize>) -> String {
    range.map(|i| format!("{prefix} {i}\n")).collect()
}

#[test]
fn stream_filter_reads_one_stream_over_the_whole_log() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("sh-2");
    let log = OutputLog::create(&dir, small(512)).unwrap();
    interleaved(&log, 600); // 1,200 transitions: most of the index is on disk
    let stderr = |mode, max_bytes, max_lines, after| ReadRequest {
        mode,
        after,
        stream: Some(Stream::Stderr),
        limits: OutputLimits { max_bytes, max_lines },
    };
    let check = |log: &OutputLog| {
        let all = log.read(&stderr(ReadMode::Head, 1 << 20, 10_000, 0)).unwrap();
        assert_eq!(
            (all.output.clone(), all.truncated, all.stream),
            (expected_stream("err", 0..600), false, Some(Stream::Stderr))
        );
        let tail = log.read(&stderr(ReadMode::Tail, 1 << 20, 3, 0)).unwrap();
        assert_eq!(content(&tail), expected_stream("err", 597..600));
        let s = log.stats();
        assert_eq!(
            tail.omitted_bytes,
            s.stream_bytes.stderr - expected_stream("err", 597..600).len() as u64
        );
        // Delta from a cursor in the middle, continued to the end.
        let mut cursor = s.total_bytes / 2;
        let mut got = String::new();
        loop {
            let v = log.read(&stderr(ReadMode::Delta, 700, 2000, cursor)).unwrap();
            got.push_str(content(&v));
            if !v.truncated {
                break;
            }
            assert!(v.next_cursor > cursor);
            cursor = v.next_cursor;
        }
        // The cursor fell mid-line: the first piece is the rest of that stderr line.
        assert!(got.ends_with(&expected_stream("err", 590..600)) && !got.contains("out"), "{got}");
        let out = log
            .read(&ReadRequest {
                stream: Some(Stream::Stdout),
                ..req(ReadMode::Middle, 1000, 2000)
            })
            .unwrap();
        assert!(out.output.starts_with("out 0\n") && !out.output.contains("err"));
        let g = log
            .grep(&GrepRequest {
                pattern: "1$".into(),
                stream: Some(Stream::Stdout),
                max_matches: 1000,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(g.matches, 60);
        assert!(g.lines.iter().all(|l| l.text.starts_with("out ")));
    };
    check(&log);
    let s = log.stats();
    assert_eq!(s.stream_bytes.stdout, expected_stream("out", 0..600).len() as u64);
    log.finish().unwrap();
    check(&OutputLog::open(&dir).unwrap());
}

#[test]
fn keep_head_tail_drops_the_middle_exactly_and_reports_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("sh-4");
    let cfg = OutputConfig {
        retained_cap: 1000,
        disk_cap: 5000,
        disk_policy: DiskPolicy::KeepHeadTail,
        ..Default::default()
    };
    let log = OutputLog::create(&dir, cfg).unwrap();
    let data = numbered_lines(2000); // 22,000 bytes
    let mut outcomes = Vec::new();
    for chunk in data.chunks(700) {
        outcomes.push(log.append(Stream::Stdout, chunk).unwrap());
    }
    assert_eq!(outcomes[..7], vec![AppendOutcome::Written; 7][..]);
    assert_eq!(
        outcomes[7],
        AppendOutcome::CapReached { policy: DiskPolicy::KeepHeadTail, reason: "disk cap".into() }
    );
    assert!(
        outcomes[8..]
            .iter()
            .all(|o| *o == AppendOutcome::NotSpooled { policy: DiskPolicy::KeepHeadTail })
    );
    let live = log.stats();
    assert_eq!(live.gaps, vec![Gap { start: 5000, end: 21_000, reason: "disk cap".into() }]);
    assert_eq!((live.dropped_bytes, live.spooled_bytes, live.total_bytes), (16_000, 5000, 22_000));
    // While running, the tail is still served from memory.
    let tail = log.read(&req(ReadMode::Tail, 500, 2000)).unwrap();
    assert!(content(&tail).ends_with("line 01999\n"));
    log.finish().unwrap();
    assert_eq!(std::fs::metadata(log.spool_path()).unwrap().len(), 6000);
    let check = |log: &OutputLog| {
        let s = log.stats();
        assert_eq!(s.gaps, vec![Gap { start: 5000, end: 21_000, reason: "disk cap".into() }]);
        assert_eq!(s.dropped_bytes, 16_000);
        assert_eq!(log.read_raw(0, 1 << 20).unwrap(), (data[..5000].to_vec(), 5000));
        assert_eq!(log.read_raw(5000, 1 << 20).unwrap(), (Vec::new(), 21_000));
        assert_eq!(log.read_raw(6000, 1 << 20).unwrap(), (Vec::new(), 21_000));
        assert_eq!(log.read_raw(21_000, 1 << 20).unwrap(), (data[21_000..].to_vec(), 22_000));
        // A delta read stops at the gap, the next one jumps it and says so.
        let v = log
            .read(&ReadRequest { after: 4000, ..req(ReadMode::Delta, 1 << 20, 100_000) })
            .unwrap();
        assert!(v.truncated && v.next_cursor == 5000);
        // 5000 is mid-line: the notice starts on a line of its own.
        assert_eq!(content(&v).as_bytes(), &data[4000..5000]);
        assert!(text(&v).as_bytes().starts_with(&[&data[4000..5000], "\n[… ".as_bytes()].concat()));
        assert_eq!(v.gaps, s.gaps);
        let v = log
            .read(&ReadRequest { after: 5000, ..req(ReadMode::Delta, 1 << 20, 100_000) })
            .unwrap();
        let marker = "[… 16,000 bytes at offsets 5000..21000 were not kept (disk cap) …]\n";
        assert_eq!(v.output, format!("{marker}{}", std::str::from_utf8(&data[21_000..]).unwrap()));
        assert_eq!((v.start_cursor, v.next_cursor, v.dropped_bytes), (21_000, 22_000, 16_000));
        let tail = log.read(&req(ReadMode::Tail, 100_000, 100_000)).unwrap();
        assert!(tail.truncated && content(&tail).as_bytes() == &data[21_000..]);
        assert!(
            text(&tail).contains("16,000 bytes at offsets 5000..21000 were not kept (disk cap)")
        );
        let g = log
            .grep(&GrepRequest { pattern: "line 0(0000|1990)".into(), ..Default::default() })
            .unwrap();
        let found: Vec<_> = g.lines.iter().map(|l| (l.line_number, l.offset)).collect();
        assert_eq!(found, vec![(1, 0), (1991, 21_890)]);
    };
    check(&log);
    check(&OutputLog::open(&dir).unwrap());
}

#[test]
fn kill_policy_asks_the_caller_to_terminate_and_writes_nothing_past_the_cap() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("sh-5");
    let cfg = OutputConfig { disk_cap: 5000, disk_policy: DiskPolicy::Kill, ..Default::default() };
    let log = OutputLog::create(&dir, cfg).unwrap();
    let data = numbered_lines(600);
    assert_eq!(log.append(Stream::Stdout, &data[..3000]).unwrap(), AppendOutcome::Written);
    assert_eq!(
        log.append(Stream::Stdout, &data[3000..6000]).unwrap(),
        AppendOutcome::CapReached { policy: DiskPolicy::Kill, reason: "disk cap".into() }
    );
    assert_eq!(
        log.append(Stream::Stdout, &data[6000..]).unwrap(),
        AppendOutcome::NotSpooled { policy: DiskPolicy::Kill }
    );
    assert_eq!(log.cap_reached().unwrap().at, 5000);
    log.finish().unwrap();
    assert_eq!(std::fs::read(log.spool_path()).unwrap(), data[..5000]);
    let reopened = OutputLog::open(&dir).unwrap();
    for l in [&log, &reopened] {
        let s = l.stats();
        assert_eq!(s.gaps, vec![Gap { start: 5000, end: 6600, reason: "disk cap".into() }]);
        assert_eq!((s.total_bytes, s.dropped_bytes, s.spooled_bytes), (6600, 1600, 5000));
    }
    let v = reopened.read(&req(ReadMode::Head, 1 << 20, 100_000)).unwrap();
    assert!(v.truncated && v.dropped_bytes == 1600);
    assert_eq!(content(&v).as_bytes(), &data[..5000]);
}

#[test]
fn planted_symlinks_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    // The session dir itself.
    let dir = t.path().join("sh-6");
    std::os::unix::fs::symlink(&target, &dir).unwrap();
    assert!(
        matches!(OutputLog::create(&dir, OutputConfig::default()), Err(OutputError::SymlinkRefused { path }) if path == dir)
    );
    assert!(matches!(OutputLog::open(&dir), Err(OutputError::SymlinkRefused { .. })));
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // An existing directory is refused too (a new log needs a fresh one).
    assert!(matches!(
        OutputLog::create(&target, OutputConfig::default()),
        Err(OutputError::AlreadyExists { .. })
    ));

    // The spool file: replaced by a symlink before a reader opens it.
    let dir = t.path().join("sh-7");
    let log = OutputLog::create(&dir, OutputConfig::default()).unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(log.spool_path()).unwrap().permissions().mode() & 0o777, 0o600);
    log.finish().unwrap();
    let secret = t.path().join("secret");
    std::fs::write(&secret, "do not read").unwrap();
    std::fs::remove_file(log.spool_path()).unwrap();
    std::os::unix::fs::symlink(&secret, log.spool_path()).unwrap();
    assert!(
        matches!(OutputLog::open(&dir), Err(OutputError::SymlinkRefused { path }) if path == log.spool_path())
    );

    // The spool file in file capture: the child's fd is never opened through a symlink.
    let dir = t.path().join("sh-8");
    let log =
        OutputLog::create(&dir, OutputConfig { capture: Capture::File, ..Default::default() })
            .unwrap();
    std::fs::remove_file(log.spool_path()).unwrap();
    std::os::unix::fs::symlink(&secret, log.spool_path()).unwrap();
    assert!(matches!(log.child_fd(), Err(OutputError::SymlinkRefused { .. })));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "do not read");
}

fn spawn_piped(script: &str) -> (ChildGuard, Vec<(Stream, OwnedFd)>) {
    let mut child = ChildGuard::spawn(
        Command::new("sh").args(["-c", script]).stdout(Stdio::piped()).stderr(Stdio::piped()),
    );
    let out = OwnedFd::from(child.0.stdout.take().unwrap());
    let err = OwnedFd::from(child.0.stderr.take().unwrap());
    (child, vec![(Stream::Stdout, out), (Stream::Stderr, err)])
}

#[test]
fn a_command_that_prints_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("sh-9");
    let log = Arc::new(OutputLog::create(&dir, OutputConfig::default()).unwrap());
    let (mut child, sources) = spawn_piped("true");
    let summary = drain_to_end(&log, sources).unwrap();
    assert!(child.0.wait().unwrap().success());
    assert_eq!((summary.bytes, summary.cap_reached, summary.cancelled), (0, None, false));
    log.finish().unwrap();
    for l in [&*log, &OutputLog::open(&dir).unwrap()] {
        for mode in [ReadMode::Delta, ReadMode::Tail, ReadMode::Head, ReadMode::Middle] {
            let v = l.read(&ReadRequest { mode, ..Default::default() }).unwrap();
            assert_eq!(
                (v.output.as_str(), v.truncated, v.total_bytes, v.total_lines, v.next_cursor),
                ("", false, 0, 0, 0)
            );
        }
        let v =
            l.read(&ReadRequest { stream: Some(Stream::Stderr), ..Default::default() }).unwrap();
        assert_eq!(v.output, "");
        assert_eq!(
            l.grep(&GrepRequest { pattern: ".".into(), ..Default::default() }).unwrap().matches,
            0
        );
        assert_eq!(l.read_raw(0, 10).unwrap(), (Vec::new(), 0));
    }
}

#[test]
fn drain_keeps_stream_order_and_totals() {
    let (_t, log) = new_log(OutputConfig::default());
    let log = Arc::new(log);
    let (mut child, sources) =
        spawn_piped("echo one; sleep 0.05; echo two >&2; sleep 0.05; echo three");
    let summary = drain_to_end(&log, sources).unwrap();
    assert!(child.0.wait().unwrap().success());
    assert_eq!(summary.bytes, 14);
    let v = log.read(&ReadRequest::default()).unwrap();
    assert_eq!(v.output, "one\ntwo\nthree\n");
    let s = log.stats();
    assert_eq!((s.stream_bytes.stdout, s.stream_bytes.stderr), (10, 4));
    let e = log.read(&ReadRequest { stream: Some(Stream::Stderr), ..Default::default() }).unwrap();
    assert_eq!(e.output, "two\n");
}

#[test]
fn drain_cancel_takes_what_is_readable_and_returns() {
    let (_t, log) = new_log(OutputConfig::default());
    // Close-on-exec: other tests of this binary spawn children concurrently.
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    rustix::io::write(&w, b"buffered").unwrap();
    let log = Arc::new(log);
    // The pipe stays open (its write end is held below): only the cancel ends this drain.
    let handle = Drainer::global().unwrap().add(log.clone(), vec![(Stream::Stdout, r)]).unwrap();
    handle.cancel();
    let summary = handle.join().unwrap();
    assert!(summary.cancelled);
    assert_eq!(summary.bytes, 8);
    assert_eq!(log.read_raw(0, 100).unwrap().0, b"buffered");
    drop(w);
}

#[test]
fn file_capture_round_trip_with_a_real_child() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("sh-10");
    let cfg = OutputConfig {
        capture: Capture::File,
        retained_cap: 64,
        disk_cap: 1 << 20,
        ..Default::default()
    };
    let log = OutputLog::create(&dir, cfg).unwrap();
    assert!(matches!(log.append(Stream::Stdout, b"x"), Err(OutputError::WrongCapture { .. })));
    let fd = log.child_fd().unwrap();
    let mut child = ChildGuard::spawn(
        Command::new("sh")
            .args(["-c", "echo out; echo err >&2; i=0; while [ $i -lt 100 ]; do echo line $i; i=$((i+1)); done; printf tail"])
            .stdout(Stdio::from(fd.try_clone().unwrap()))
            .stderr(Stdio::from(fd)),
    );
    assert!(child.0.wait().unwrap().success());
    assert_eq!(log.sync_from_file().unwrap(), AppendOutcome::Written);
    let expected = std::fs::read(log.spool_path()).unwrap();
    assert!(expected.starts_with(b"out\nerr\nline 0\n") && expected.ends_with(b"line 99\ntail"));
    let s = log.stats();
    assert_eq!((s.total_bytes, s.newlines, s.total_lines), (expected.len() as u64, 102, 103));
    // File capture copies nothing into memory: no hot tail, reads go to the spool by offset.
    assert_eq!(
        (s.stream_bytes.combined, s.hot_tail_bytes, s.last_line_incomplete),
        (expected.len() as u64, 0, true)
    );
    assert!(log.held_bytes() <= stockade_log::LOG_BOOKKEEPING_BYTES);
    let v = log.read(&req(ReadMode::Tail, 1 << 20, 3)).unwrap();
    // The notice goes on its own line, after the incomplete last line.
    assert_eq!(content(&v), "line 98\nline 99\ntail");
    assert!(text(&v).starts_with("line 98\nline 99\ntail\n[… "), "{}", text(&v));
    let v = log.read(&req(ReadMode::Head, 1 << 20, 100_000)).unwrap();
    assert_eq!(v.output.as_bytes(), &expected[..]);
    log.finish().unwrap();
    let reopened = OutputLog::open(&dir).unwrap();
    assert_eq!(reopened.stats().total_bytes, expected.len() as u64);
    let v = reopened
        .read(&ReadRequest { stream: Some(Stream::Combined), ..Default::default() })
        .unwrap();
    assert_eq!(v.output.as_bytes(), &expected[..]);

    // The disk cap in file mode: the child overruns, sync reports it once, nothing is lost.
    let dir = t.path().join("sh-11");
    let log = OutputLog::create(
        &dir,
        OutputConfig { capture: Capture::File, disk_cap: 1000, ..Default::default() },
    )
    .unwrap();
    let fd = log.child_fd().unwrap();
    let mut child = ChildGuard::spawn(
        Command::new("sh")
            .args(["-c", "head -c 3000 /dev/zero | tr '\\0' a"])
            .stdout(Stdio::from(fd)),
    );
    assert!(child.0.wait().unwrap().success());
    assert_eq!(
        log.sync_from_file().unwrap(),
        AppendOutcome::CapReached { policy: DiskPolicy::Kill, reason: "disk cap".into() }
    );
    assert_eq!(
        log.sync_from_file().unwrap(),
        AppendOutcome::NotSpooled { policy: DiskPolicy::Kill }
    );
    let s = log.stats();
    assert_eq!((s.total_bytes, s.dropped_bytes, s.gaps.len()), (3000, 0, 0));
    assert_eq!(log.read_raw(0, 10_000).unwrap().0, vec![b'a'; 3000]);
}

#[test]
fn wait_for_output_returns_on_new_bytes_finish_or_timeout() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let (_t, log) = new_log(OutputConfig::default());
    let log = Arc::new(log);
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            log.append(Stream::Stdout, b"hi\n").unwrap();
        })
    };
    rt.block_on(async {
        assert!(log.wait_for_output(0, Duration::from_secs(10)).await);
        assert_eq!(log.stats().total_bytes, 3);
        assert!(!log.wait_for_output(3, Duration::from_millis(30)).await);
        log.finish().unwrap();
        assert!(log.wait_for_output(3, Duration::from_secs(10)).await);
    });
    writer.join().unwrap();
    assert!(matches!(log.append(Stream::Stdout, b"late"), Err(OutputError::Finished)));
}

#[test]
fn reopen_without_metadata_recovers_counters_from_the_files() {
    let t = tempfile::tempdir().unwrap();
    let dir: PathBuf = t.path().join("sh-12");
    let log = OutputLog::create(&dir, OutputConfig::default()).unwrap();
    interleaved(&log, 300);
    let before = log.stats();
    drop(log); // a writer that died: no finish(), no log.json
    let r = OutputLog::open(&dir).unwrap();
    let s = r.stats();
    assert_eq!(
        (s.total_bytes, s.newlines, s.finished),
        (before.total_bytes, before.newlines, true)
    );
    let durable_records =
        std::fs::metadata(Path::new(&dir).join("streams.idx")).unwrap().len() / 48;
    assert_eq!(durable_records, 500); // the last 100 transitions were still buffered
    let v = r.read(&req(ReadMode::Tail, 1 << 20, 2)).unwrap();
    assert_eq!(content(&v), "out 299\nerr 299\n");
}

#[test]
fn bad_regex_is_a_typed_error() {
    let (_t, log) = new_log(OutputConfig::default());
    log.append(Stream::Stdout, b"x\n").unwrap();
    match log.grep(&GrepRequest { pattern: "(unclosed".into(), ..Default::default() }) {
        Err(OutputError::BadRegex { reason, .. }) => {
            assert!(reason.contains("unclosed"), "{reason}")
        }
        other => panic!("expected BadRegex, got {other:?}"),
    }
}
