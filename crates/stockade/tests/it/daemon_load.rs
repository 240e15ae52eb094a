//! The memory invariant through the real daemon (jemalloc, as shipped): 32 background sessions
//! print 20 MiB each with nobody reading; every byte is on disk and can be read back by cursor,
//! and the daemon's peak RSS stays bounded.

use std::io::Read;
use std::time::Duration;

use serde_json::json;
use stockade_testkit::{DaemonProc, base64_decode, eventually};

const SESSIONS: usize = 32;
const BYTES: u64 = 20 * 1024 * 1024;
/// Peak RSS bound for the daemon over the whole test: the output is only in the spools (no
/// per-session copy in memory), so this is the daemon itself plus read buffers; a 1 MiB ring per
/// session would need over 44 MiB.
const PEAK_RSS_BOUND: u64 = 28 * 1024 * 1024;
/// Bytes per cursor read.
const CHUNK: u64 = 1024 * 1024;

/// `yes X` prints "X\n" forever: byte `i` of its output is `X` when `i` is even.
fn check_pattern(bytes: &[u8], offset: u64, what: &str) {
    for (i, &b) in bytes.iter().enumerate() {
        let want = if (offset + i as u64).is_multiple_of(2) { b'X' } else { b'\n' };
        assert_eq!(b, want, "{what}: byte {} differs", offset + i as u64);
    }
}

#[test]
fn thirty_two_sessions_of_20_mib_are_kept_exactly_with_bounded_daemon_memory() {
    let daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    let baseline = rpc.ok("stats", json!({}));
    let command = format!("yes X | head -c {BYTES}");
    let ids: Vec<String> = (0..SESSIONS)
        .map(|_| {
            let r = rpc.ok("run", json!({"command": command, "background": true}));
            r["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // Nobody reads while they print; only `list` is polled to see them end.
    let sessions = eventually(Duration::from_secs(300), "all sessions to exit", || {
        let list = rpc.ok("list", json!({}));
        let all = list["sessions"].as_array().unwrap().clone();
        all.iter().all(|s| s["state"] == "exited").then_some(all)
    });
    let after_write = rpc.ok("stats", json!({}));
    assert_eq!(sessions.len(), SESSIONS);
    for s in &sessions {
        assert_eq!(s["code"], 0, "{s}");
        assert_eq!(s["total_bytes"], BYTES, "total_bytes exact: {s}");
        assert_eq!(s["dropped_bytes"], 0);
    }
    assert_eq!(after_write["output_bytes"], BYTES * SESSIONS as u64);
    assert_eq!(after_write["spooled_bytes"], BYTES * SESSIONS as u64);

    // Each spool is byte-identical to what `yes X | head -c` printed.
    for s in &sessions {
        let mut file = std::fs::File::open(s["spool_path"].as_str().unwrap()).unwrap();
        let mut buf = vec![0u8; 4 << 20];
        let mut offset = 0u64;
        loop {
            let n = file.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            check_pattern(&buf[..n], offset, "spool");
            offset += n as u64;
        }
        assert_eq!(offset, BYTES, "spool length");
    }

    // Read every session back through the daemon by cursor, raw, 1 MiB at a time.
    let mut reads = 0;
    for id in &ids {
        let mut cursor = 0u64;
        loop {
            let r =
                rpc.ok("read", json!({"id": id, "after": cursor, "raw": true, "max_bytes": CHUNK}));
            let bytes = base64_decode(r["bytes_b64"].as_str().unwrap());
            reads += 1;
            check_pattern(&bytes, cursor, id);
            let next = r["next_cursor"].as_u64().unwrap();
            assert_eq!(next, cursor + bytes.len() as u64);
            assert_eq!(r["total_bytes"], BYTES);
            if bytes.is_empty() {
                break;
            }
            cursor = next;
        }
        assert_eq!(cursor, BYTES, "{id}: the cursor walk reaches the end");
    }
    let after_raw = rpc.ok("stats", json!({}));
    // And one session through text views (delta mode): the cursors tile the log exactly.
    let mut cursor = 0u64;
    while cursor < BYTES {
        let r = rpc.ok(
            "read",
            json!({"id": ids[0], "after": cursor, "max_bytes": CHUNK, "max_lines": 10_000_000}),
        );
        assert_eq!(r["start_cursor"], cursor);
        let next = r["next_cursor"].as_u64().unwrap();
        assert!(next > cursor, "a cursor read always advances");
        let shown = (next - cursor) as usize;
        check_pattern(&r["output"].as_str().unwrap().as_bytes()[..shown], cursor, "view");
        cursor = next;
    }
    assert_eq!(cursor, BYTES);

    let after_read = rpc.ok("stats", json!({}));
    let mib = |v: &serde_json::Value| v.as_u64().unwrap() as f64 / (1024.0 * 1024.0);
    eprintln!(
        "daemon 32x20MiB: baseline rss {:.1} MiB; after writes rss {:.1} MiB, peak {:.1} MiB, allocated {:.1} MiB, hot tails {:.1} MiB; after {reads} raw reads peak {:.1} MiB; after the view walk: rss {:.1} MiB, peak {:.1} MiB, allocated {:.1} MiB; output {:.0} MiB",
        mib(&baseline["rss_bytes"]),
        mib(&after_write["rss_bytes"]),
        mib(&after_write["peak_rss_bytes"]),
        mib(&after_write["allocated_bytes"]),
        mib(&after_write["hot_tail_bytes"]),
        mib(&after_raw["peak_rss_bytes"]),
        mib(&after_read["rss_bytes"]),
        mib(&after_read["peak_rss_bytes"]),
        mib(&after_read["allocated_bytes"]),
        mib(&after_read["output_bytes"]),
    );
    assert!(after_write["allocated_bytes"].as_u64().unwrap() > 0, "jemalloc reports its bytes");
    let peak = after_read["peak_rss_bytes"].as_u64().unwrap();
    assert!(peak < PEAK_RSS_BOUND, "daemon peak RSS {peak} bytes is under {PEAK_RSS_BOUND}");

    let cleaned = rpc.ok("cleanup", json!({}));
    assert_eq!(cleaned["removed_bytes"], BYTES * SESSIONS as u64);
}
