//! Interactive sessions through the socket: real programs on a PTY (`python3 -i`, `bash -i`,
//! `less`) and on a stdin pipe (`cat`), driven with `write`, `resize` and `read` (text, raw and
//! screen renders); Ctrl-C; the memory bound for a PTY printing 20 MiB; clear refusals; and
//! nothing left running after `kill`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_proto::rpc::code;
use stockade_testkit::procs::marked_processes;
use stockade_testkit::{Fixture, Rpc, eventually};

/// Longest any one interaction may take before the test fails.
const WITHIN: Duration = Duration::from_secs(20);

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

/// Read text (the default render) from `cursor` until it contains `needle`; returns everything
/// read and the cursor after it.
fn read_until(rpc: &mut Rpc, id: &str, mut cursor: u64, needle: &str) -> (String, u64) {
    let mut seen = String::new();
    let deadline = Instant::now() + WITHIN;
    while !seen.contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} from {id} in {WITHIN:?}; saw {seen:?}");
        let r = rpc.ok("read", json!({"id": id, "after": cursor, "wait_ms": 1000}));
        seen.push_str(r["output"].as_str().unwrap());
        cursor = r["next_cursor"].as_u64().unwrap();
        if r["state"] != "running" && !seen.contains(needle) {
            panic!("{id} ended ({r}) before printing {needle:?}; saw {seen:?}");
        }
    }
    (seen, cursor)
}

/// Write `chars` and return the answer (a read delta from just before the write).
fn write(rpc: &mut Rpc, id: &str, chars: &str) -> Value {
    rpc.ok("write", json!({"id": id, "chars": chars, "yield_ms": 200}))
}

/// Kill the session and check that nothing carrying its marker is left.
fn kill_and_check(f: &Fixture, rpc: &mut Rpc, id: &str) {
    let killed = rpc.ok("kill", json!({"id": id}));
    assert_eq!(killed["report"]["terminated"], true, "{killed}");
    assert!(marked_processes(&f.marker(id)).is_empty(), "{id} left processes behind");
}

fn pty_run(rpc: &mut Rpc, command: &str, rows: u16, cols: u16) -> String {
    let r = rpc.ok(
        "run",
        json!({"command": command, "pty": {"rows": rows, "cols": cols}, "background": true}),
    );
    assert_eq!(r["state"], "running", "{r}");
    id_of(&r)
}

#[test]
fn python_repl_on_a_pty_answers_what_is_typed() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = pty_run(&mut rpc, "python3 -i -q", 24, 80);
    let w = write(&mut rpc, &id, "print(6*7)\n");
    assert_eq!(w["id"], id.as_str());
    assert_eq!(w["state"], "running");
    let start = w["start_cursor"].as_u64().unwrap();
    let (seen, _) = read_until(&mut rpc, &id, start, "42\n");
    assert!(seen.contains("print(6*7)"), "the terminal echoes what was typed: {seen:?}");
    assert!(!seen.contains('\u{1b}'), "text views carry no escape codes: {seen:?}");
    assert!(!seen.contains('\r'), "\\r\\n reads as \\n: {seen:?}");
    let listed = rpc.ok("list", json!({}));
    let me = &listed["sessions"][0];
    assert_eq!(me["pty"], true, "{me}");
    assert_eq!(me["pty_size"], json!({"rows": 24, "cols": 80}));
    assert_eq!(me["stdin_open"], true);
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn bash_on_a_pty_reads_a_line_typed_later() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = pty_run(&mut rpc, "bash --norc -i", 24, 80);
    let w = write(&mut rpc, &id, "read x; echo got:$x\n");
    let cursor = w["start_cursor"].as_u64().unwrap();
    let w2 = write(&mut rpc, &id, "hello\n");
    assert!(w2["start_cursor"].as_u64().unwrap() >= cursor);
    let (seen, _) = read_until(&mut rpc, &id, cursor, "got:hello");
    assert!(seen.contains("read x; echo got:$x"), "{seen:?}");
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn cat_over_a_stdin_pipe_gives_back_the_exact_bytes_and_exits_at_close() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let r = rpc.ok("run", json!({"command": "cat", "stdin": "pipe", "background": true}));
    let id = id_of(&r);
    // Every byte value, twice, plus a line: NUL, invalid UTF-8 and all.
    let mut bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
    bytes.extend_from_slice(b"last line\n");
    let b64 = stockade_proto::rpc::encode_bytes(&bytes);
    let w = rpc
        .ok("write", json!({"id": id, "bytes_b64": b64, "close_stdin": true, "yield_ms": 10000}));
    assert_eq!(w["state"], "exited", "the window ends when cat exits: {w}");
    assert_eq!(w["code"], 0);
    assert_eq!(w["total_bytes"], bytes.len());
    let raw = rpc.ok("read", json!({"id": id, "after": 0, "raw": true, "max_bytes": 1 << 20}));
    let back = stockade_proto::rpc::decode_bytes(raw["bytes_b64"].as_str().unwrap());
    assert_eq!(back.unwrap(), bytes, "cat gave back exactly what was written");
    // A stdin pipe session is not a terminal.
    let resized = rpc.call("resize", json!({"id": id, "rows": 10, "cols": 10}));
    assert_eq!(resized.unwrap_err().0, code::NOT_SUPPORTED);
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn ctrl_c_interrupts_the_foreground_job_and_the_shell_lives_on() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = pty_run(&mut rpc, "bash --norc -i", 24, 80);
    write(&mut rpc, &id, "sleep 1000\n");
    let marker = f.marker(&id);
    let sleeping = || {
        marked_processes(&marker).into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
    };
    let sleep_pid = eventually(WITHIN, "sleep to start", sleeping);
    let w = write(&mut rpc, &id, "\u{3}");
    let cursor = w["start_cursor"].as_u64().unwrap();
    eventually(WITHIN, "sleep to be interrupted", || {
        (!std::path::Path::new(&format!("/proc/{sleep_pid}")).exists() || sleeping().is_none())
            .then_some(())
    });
    write(&mut rpc, &id, "echo alive:$((40+2))\n");
    let (seen, _) = read_until(&mut rpc, &id, cursor, "alive:42");
    assert!(seen.contains("^C"), "the terminal shows the interrupt: {seen:?}");
    let r = rpc.ok("read", json!({"id": id, "max_bytes": 1}));
    assert_eq!(r["state"], "running", "the shell survived Ctrl-C");
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn resize_is_seen_by_stty_size() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = pty_run(&mut rpc, "bash --norc -i", 30, 90);
    let w = write(&mut rpc, &id, "stty size\n");
    let (_, cursor) = read_until(&mut rpc, &id, w["start_cursor"].as_u64().unwrap(), "30 90");
    let r = rpc.ok("resize", json!({"id": id, "rows": 33, "cols": 101}));
    assert_eq!(r, json!({"id": id, "rows": 33, "cols": 101}));
    write(&mut rpc, &id, "stty size\n");
    read_until(&mut rpc, &id, cursor, "33 101");
    let listed = rpc.ok("list", json!({}));
    assert_eq!(listed["sessions"][0]["pty_size"], json!({"rows": 33, "cols": 101}));
    let bad = rpc.call("resize", json!({"id": id, "rows": 0, "cols": 101}));
    assert_eq!(bad.unwrap_err().0, code::INVALID_PARAMS);
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn less_renders_as_a_screen_and_pages_on_a_key() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("lines.txt");
    let text: String = (1..=200).map(|n| format!("line-{n:03}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let r = rpc.ok(
        "run",
        json!({
            "command": format!("less {}", file.display()),
            "env": {"LESS": "", "LESSOPEN": "", "LESSHISTFILE": "-"},
            "pty": {"rows": 24, "cols": 80},
            "background": true,
        }),
    );
    let id = id_of(&r);
    let screen = |rpc: &mut Rpc| rpc.ok("read", json!({"id": id, "render": "screen"}));
    let first = eventually(WITHIN, "less to draw its first page", || {
        let s = screen(&mut rpc);
        s["output"].as_str().unwrap().contains("line-023").then_some(s)
    });
    let out = first["output"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() <= 24, "one screen of 24 rows: {out}");
    assert_eq!(lines[0], "line-001", "{out}");
    assert!(!out.contains("line-030"), "only what fits on the screen: {out}");
    assert!(!out.contains('\u{1b}'), "{out}");
    assert_eq!(first["next_cursor"], first["total_bytes"], "a screen is read to the end");
    // The raw render keeps the escape codes a terminal would interpret.
    let raw = rpc.ok("read", json!({"id": id, "after": 0, "render": "raw"}));
    assert!(raw["output"].as_str().unwrap().contains('\u{1b}'), "{raw}");
    // Space pages forward.
    write(&mut rpc, &id, " ");
    let second = eventually(WITHIN, "less to show the next page", || {
        let s = screen(&mut rpc);
        s["output"].as_str().unwrap().contains("line-040").then_some(s)
    });
    assert!(!second["output"].as_str().unwrap().contains("line-001\n"), "{second}");
    // `q` quits.
    let w = rpc.ok("write", json!({"id": id, "chars": "q", "yield_ms": 10000}));
    assert_eq!(w["state"], "exited", "{w}");
    // A pipe session has no screen.
    let plain = rpc.ok("run", json!({"command": "echo hi"}));
    let refused = rpc.call("read", json!({"id": id_of(&plain), "render": "screen"}));
    assert_eq!(refused.unwrap_err().0, code::NOT_SUPPORTED);
    kill_and_check(&f, &mut rpc, &id);
}

#[test]
fn text_view_strips_colours_and_raw_keeps_them() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let r = rpc.ok(
        "run",
        json!({"command": r"printf '\033[1;31mred\033[0m plain\n'", "pty": {"rows": 24, "cols": 80}}),
    );
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["output"], "red plain\n", "{r}");
    let id = id_of(&r);
    let raw = rpc.ok("read", json!({"id": id, "after": 0, "render": "raw"}));
    assert_eq!(raw["output"], "\u{1b}[1;31mred\u{1b}[0m plain\r\n");
    let text = rpc.ok("read", json!({"id": id, "after": 0}));
    assert_eq!(text["output"], "red plain\n");
    assert_eq!(text["next_cursor"], raw["next_cursor"], "cursors are raw byte offsets");
    assert!(marked_processes(&f.marker(&id)).is_empty());
}

#[test]
fn a_pty_printing_20_mib_keeps_only_the_hot_tail_in_memory() {
    const TOTAL: u64 = 20 * 1024 * 1024;
    const CAP: u64 = 64 * 1024;
    // What the daemon may hold for the session: its ring and fixed bookkeeping, as for a pipe.
    const HELD: u64 = CAP + stockade_log::LOG_BOOKKEEPING_BYTES as u64;
    let f = Fixture::start();
    let mut rpc = f.client();
    // `-opost`: no `\n` → `\r\n` translation, so the log holds exactly what was printed.
    let started = rpc.ok(
        "run",
        json!({
            "command": format!("stty -opost; yes X | head -c {TOTAL}"),
            "pty": {"rows": 24, "cols": 80},
            "retained_cap": CAP,
            "background": true,
        }),
    );
    let id = id_of(&started);
    // While it prints, and after: the hot tail never holds more than its cap (+ bookkeeping).
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut samples = 0;
    let mut peak = 0;
    let r = loop {
        let stats = rpc.ok("stats", json!({}));
        let held = stats["hot_tail_bytes"].as_u64().unwrap();
        assert!(held <= HELD, "{stats}");
        peak = peak.max(held);
        samples += 1;
        let r = rpc.ok("read", json!({"id": id, "max_bytes": 1024}));
        if r["state"] != "running" {
            break r;
        }
        assert!(Instant::now() < deadline, "20 MiB never finished: {r}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(samples > 0 && peak > 0, "sampled while it ran ({samples} samples, peak {peak})");
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["code"], 0);
    assert_eq!(r["total_bytes"], TOTAL, "every byte counted, none added");
    let stats = rpc.ok("stats", json!({}));
    assert!(stats["hot_tail_bytes"].as_u64().unwrap() <= HELD, "{stats}");
    assert_eq!(stats["output_bytes"], TOTAL);
    assert_eq!(stats["spooled_bytes"], TOTAL);
    let spool = r["spool_path"].as_str().unwrap();
    assert_eq!(std::fs::metadata(spool).unwrap().len(), TOTAL);
    let grep = rpc.ok("grep", json!({"id": id, "pattern": "^X$", "max_matches": 1}));
    assert_eq!(grep["matches"], 1);
    assert!(marked_processes(&f.marker(&id)).is_empty());
}

#[test]
fn input_is_refused_clearly_without_stdin_after_exit_and_when_not_read() {
    let f = Fixture::start();
    let mut rpc = f.client();
    // No stdin: /dev/null.
    let r = rpc.ok("run", json!({"command": "sleep 30", "background": true}));
    let id = id_of(&r);
    let (c, m) = rpc.call("write", json!({"id": id, "chars": "x"})).unwrap_err();
    assert_eq!(c, code::NOT_SUPPORTED, "{m}");
    assert!(m.contains("without input"), "{m}");
    // An empty write only waits and reads, on any session.
    let w = rpc.ok("write", json!({"id": id, "yield_ms": 10}));
    assert_eq!(w["state"], "running");
    kill_and_check(&f, &mut rpc, &id);

    // After exit.
    let r = rpc.ok("run", json!({"command": "true", "pty": {"rows": 24, "cols": 80}}));
    let done = id_of(&r);
    assert_eq!(r["state"], "exited");
    let (c, m) = rpc.call("write", json!({"id": done, "chars": "x\n"})).unwrap_err();
    assert_eq!(c, code::NOT_SUPPORTED, "{m}");
    assert!(m.contains("has ended (exited)"), "{m}");
    let (c, _) = rpc.call("resize", json!({"id": done, "rows": 5, "cols": 5})).unwrap_err();
    assert_eq!(c, code::NOT_SUPPORTED);

    // A closed stdin pipe takes no more.
    let r = rpc.ok("run", json!({"command": "sleep 30", "stdin": "pipe", "background": true}));
    let id = id_of(&r);
    rpc.ok("write", json!({"id": id, "close_stdin": true, "yield_ms": 0}));
    let (c, m) = rpc.call("write", json!({"id": id, "chars": "x"})).unwrap_err();
    assert_eq!(c, code::NOT_SUPPORTED, "{m}");
    assert!(m.contains("closed"), "{m}");
    kill_and_check(&f, &mut rpc, &id);

    // A command that never reads: the pipe fills, the write gives up and says how far it got.
    let r = rpc.ok("run", json!({"command": "sleep 30", "stdin": "pipe", "background": true}));
    let id = id_of(&r);
    let big = stockade_proto::rpc::encode_bytes(&vec![b'y'; 256 * 1024]);
    let (c, m) = rpc.call("write", json!({"id": id, "bytes_b64": big})).unwrap_err();
    assert_eq!(c, code::INPUT_FAILED, "{m}");
    assert!(m.contains("of 262144 bytes were written"), "{m}");
    kill_and_check(&f, &mut rpc, &id);

    // Bad requests.
    let bad = [
        json!({"command": "cat", "pty": {"rows": 24, "cols": 80}, "stdin": "pipe"}),
        json!({"command": "cat", "pty": {"rows": 0, "cols": 80}}),
        json!({"command": "cat", "pty": {"rows": 24, "cols": 80}, "capture": "file"}),
    ];
    for params in bad {
        let (c, m) = rpc.call("run", params.clone()).unwrap_err();
        assert_eq!(c, code::INVALID_PARAMS, "{params}: {m}");
    }
    let (c, _) =
        rpc.call("write", json!({"id": done, "chars": "a", "bytes_b64": "YQ=="})).unwrap_err();
    assert_eq!(c, code::INVALID_PARAMS);
    let (c, _) = rpc.call("write", json!({"id": "sh-999", "chars": "a"})).unwrap_err();
    assert_eq!(c, code::NO_SUCH_SESSION);
}
