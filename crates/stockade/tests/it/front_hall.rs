//! One front hall: the E2B door passes the daemon's guards like every other door. It always has a
//! token (one is made in the home when `--token-file` is not given), so another local user gets
//! nothing; its token is reloaded with the other doors'; every command it starts is audited and
//! counted; and no door's secret (token files, TLS key, audit log) is readable from a sandbox.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use stockade_testkit::child::Reaped;
use stockade_testkit::{DaemonProc, eventually, text};

use crate::sandbox_common::{NOBODY, Sbx, User, exists, users};

/// One HTTP/1.1 request with `Connection: close`: the status and the raw rest (headers, body).
fn http(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, answer)
}

/// `process.Process/Start` of `bash -c COMMAND` (a Connect server stream: one enveloped JSON
/// message), read until the command ends.
fn start(addr: SocketAddr, token: Option<&str>, command: &str) -> (u16, String) {
    let msg = serde_json::json!({"process": {"cmd": "/bin/bash", "args": ["-c", command]}});
    let msg = serde_json::to_vec(&msg).unwrap();
    let mut body = vec![0u8];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(&msg);
    let mut headers = vec![("Content-Type", "application/connect+json")];
    if let Some(t) = token {
        headers.push(("X-Access-Token", t));
    }
    http(addr, "/process.Process/Start", &headers, &body)
}

/// `filesystem.Filesystem/Stat` of `path` (a unary Connect call).
fn stat(addr: SocketAddr, token: Option<&str>, path: &str) -> (u16, String) {
    let body = serde_json::to_vec(&serde_json::json!({ "path": path })).unwrap();
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(t) = token {
        headers.push(("X-Access-Token", t));
    }
    http(addr, "/filesystem.Filesystem/Stat", &headers, &body)
}

/// `stockade_spawn_seconds_count` of the daemon's loopback `--metrics` address.
fn spawns(d: &DaemonProc) -> u64 {
    let said = d.stderr.lock().unwrap().clone();
    let metrics: SocketAddr = said
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .expect("the metrics address")
        .parse()
        .unwrap();
    let mut s = TcpStream::connect(metrics).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find(|l| l.starts_with("stockade_spawn_seconds_count"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no spawn count in:\n{body}"))
}

/// `stockade --home HOME ARGS` against `d`, which must succeed; its stdout, trimmed.
fn cli_of(d: &DaemonProc, args: &[&str]) -> String {
    let out = Command::new(stockade_testkit::stockade_bin())
        .arg("--home")
        .arg(&d.home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

fn read_token(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

/// `--e2b` without `--token-file`: a token is made in the home (0600), the start line names it;
/// `nobody` — any local user, who can reach loopback — can neither read it nor do anything at
/// the door without it (start a command, stat a file), while the token's holder can.
#[test]
fn a_token_less_e2b_door_makes_a_token_and_another_user_gets_nothing() {
    if users().len() < 2 {
        return; // `users` has said why (and failed under CI).
    }
    let d = DaemonProc::start(&["--e2b", "127.0.0.1:0"]);
    let addr = d.e2b_addr();
    let file = d.home.join("e2b-token");
    let said = d.stderr.lock().unwrap().clone();
    assert!(said.contains(&format!("the token is in {}", file.display())), "{said}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the made token is private");
    let token = read_token(&file);
    assert!(token.len() >= 32, "a long random token");

    // As nobody: the token file cannot be read, and the door answers nothing without it.
    let url = format!("http://{addr}");
    let script = format!(
        r#"
import sys, urllib.request, urllib.error
try:
    open({file:?}).read(); print("token=read")
except OSError:
    print("token=unreadable")
def call(path, body, ctype):
    req = urllib.request.Request({url:?} + path, data=body, headers={{"Content-Type": ctype}})
    try:
        urllib.request.urlopen(req, timeout=20).read(); return "200"
    except urllib.error.HTTPError as e:
        return str(e.code)
print("start=" + call("/process.Process/Start", b"\x00\x00\x00\x00\x2a" + b'{{"process":{{"cmd":"/bin/bash","args":["-c","id -u"]}}}}', "application/connect+json"))
print("stat=" + call("/filesystem.Filesystem/Stat", b'{{"path":"/etc/shadow"}}', "application/json"))
"#,
        file = file.display().to_string(),
    );
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c"])
        .arg(&script)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    for line in ["token=unreadable", "start=401", "stat=401"] {
        assert!(said.lines().any(|l| l == line), "as nobody, expected {line}:\n{said}");
    }
    // The token's holder is let in.
    let (status, answer) = stat(addr, Some(&token), "/");
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = start(addr, None, "true");
    assert_eq!(status, 401, "no token, no start: {answer}");
}

/// A command started at the E2B door is one audit line (door `e2b`, the command, its session)
/// and one count of the spawn metric, like a `run` on the Unix socket.
#[test]
fn an_e2b_start_is_audited_and_counted_like_any_run() {
    let tmp = tempfile::tempdir().unwrap();
    let audit = tmp.path().join("audit.log");
    let d = DaemonProc::start(&[
        "--e2b",
        "127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
        "--audit-log",
        audit.to_str().unwrap(),
    ]);
    let token = read_token(&d.home.join("e2b-token"));
    let (status, answer) = start(d.e2b_addr(), Some(&token), "echo audited-e2b-start");
    assert_eq!(status, 200, "{answer}");
    let line = eventually(Duration::from_secs(10), "the audit line of the E2B start", || {
        let log = std::fs::read_to_string(&audit).ok()?;
        log.lines().find(|l| l.contains("audited-e2b-start")).map(str::to_owned)
    });
    let line: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["door"], "e2b", "{line}");
    assert_eq!(line["method"], "run", "{line}");
    assert_eq!(line["command"], "echo audited-e2b-start", "{line}");
    assert!(line["session"].as_str().is_some_and(|s| !s.is_empty()), "{line}");
    assert!(line["token_id"].as_str().is_some_and(|s| s.len() == 8), "{line}");
    assert!(line["peer"].as_str().is_some_and(|s| s.starts_with("127.0.0.1:")), "{line}");
    // The spawn metric counted it.
    assert_eq!(spawns(&d), 1, "one spawn counted");
}

/// No door's secret is readable from a sandbox, as root and as nobody: the WebSocket and E2B
/// token file outside the home, the read-only metrics token, the TLS private key, the audit log
/// (and its rotated copy), the token made in the home, and the token file of a `stockade mcp
/// --http` started after the daemon.
#[test]
fn no_doors_secret_is_readable_from_a_sandbox() {
    for user in users() {
        let s = Sbx::new(user);
        let file = |name: &str, content: &str| {
            let p = s.outside.join(name);
            std::fs::write(&p, content).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            if user == User::Nobody {
                std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
            }
            p
        };
        let token = file("door-token", "door-token-0123456789abcdef\n");
        let scrape = file("metrics-token", "metrics-token-0123456789abcdef\n");
        let audit = s.outside.join("audit.log");
        let (cert, key) = (s.outside.join("cert.pem"), s.outside.join("key.pem"));
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
            .args(["-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(made.success(), "openssl made a certificate");
        for p in [&cert, &key] {
            if user == User::Nobody {
                std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let arg = |p: &Path| p.to_str().unwrap().to_owned();
        let (tok, scr, aud, crt, k) =
            (arg(&token), arg(&scrape), arg(&audit), arg(&cert), arg(&key));
        let _daemon = Reaped(
            s.cli(&[
                "daemon",
                "run",
                "--ws",
                "127.0.0.1:0",
                "--e2b",
                "127.0.0.1:0",
                "--token-file",
                &tok,
                "--metrics-token-file",
                &scr,
                "--audit-log",
                &aud,
                "--tls-cert",
                &crt,
                "--tls-key",
                &k,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        );
        let sock = s.home.path().join("stockade.sock");
        eventually(Duration::from_secs(20), "the daemon's socket", || sock.exists().then_some(()));
        // A first run, so the audit log has a line (and `.1` may exist as a name to hide).
        assert_eq!(s.run(&[], "echo warm")["output"], "warm\n");
        assert!(exists(&audit));
        // `stockade mcp --http` with a token file the daemon was not started with: the server
        // has the daemon hide it before it listens.
        let mcp_token = arg(&file("mcp-token", "mcp-token-0123456789abcdef\n"));
        let mut mcp = Reaped(
            s.cli(&["mcp", "--http", "127.0.0.1:0", "--token-file", &mcp_token])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut said = std::io::BufReader::new(mcp.0.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            use std::io::BufRead as _;
            assert!(said.read_line(&mut line).unwrap() > 0, "stockade mcp --http ended");
        }
        let script = format!(
            "t token cat {tok}\nt scrape cat {scr}\nt audit cat {aud}\nt key cat {k}\nt mcp cat {mcp_token}\nt cert_readable cat {crt}"
        );
        for policy in [&["--sandbox", "read-only"][..], &["--sandbox", "workspace-write"]] {
            let (v, answer) = s.verdicts(policy, &script);
            v.expect("denied", &["token", "scrape", "audit", "key", "mcp"], user);
            // The certificate is public: reading it is no leak (and shows the reads above ran).
            v.expect("allowed", &["cert_readable"], user);
            assert!(answer["sandbox"].as_str().is_some(), "{answer}");
        }
    }
}

/// `stockade mcp` over stdio with `args`, initialized; `call(id, name, arguments)` answers one
/// tool call. The server ends when the returned guard drops its input.
struct Mcp {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::io::BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(s: &Sbx, args: &[&str]) -> Mcp {
        let mut child = s
            .cli(&[&["mcp"][..], args].concat())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = child.stdin.take();
        let output = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp { child, input, output, next: 1 };
        let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
        mcp.request("initialize", init);
        mcp.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: serde_json::Value) {
        writeln!(self.input.as_ref().unwrap(), "{msg}").unwrap();
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next;
        self.next += 1;
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let mut line = String::new();
            use std::io::BufRead as _;
            assert!(self.output.read_line(&mut line).unwrap() > 0, "the MCP server closed");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// An `exec_command`: whether it was an error, and its text.
    fn exec(&mut self, arguments: serde_json::Value) -> (bool, String) {
        let answer = self.request(
            "tools/call",
            serde_json::json!({"name": "exec_command", "arguments": arguments}),
        );
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        (answer["result"]["isError"] == true, text)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.input.take());
        let stopped = stockade_testkit::child::wait_bounded(
            &mut self.child,
            stockade_testkit::child::STOP_TIMEOUT,
        );
        if stopped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `stockade mcp --sandbox workspace-write` sends its policy to the daemon as the run's ceiling,
/// held by the daemon's one rule: a `workdir` outside `--writable-root` (or, without one, outside
/// the project the server was started in) is refused and writes nothing, while the exact
/// `{mode: "workspace-write"}` — which names no network — is the server's own policy and runs.
#[test]
fn mcp_holds_every_workdir_to_its_ceiling_through_the_daemon() {
    let s = Sbx::new(User::Root);
    let work = s.work.to_str().unwrap().to_owned();
    let outside = s.outside.to_str().unwrap().to_owned();
    for roots in [&["--writable-root", work.as_str()][..], &[]] {
        let mut args = vec!["--sandbox", "workspace-write", "--network", "none"];
        args.extend(roots);
        let mut mcp = Mcp::start(&s, &args);
        let escaped = s.outside.join("escaped");
        let (error, said) =
            mcp.exec(serde_json::json!({"cmd": "touch escaped", "workdir": outside}));
        assert!(error, "{roots:?}: a workdir outside the roots runs: {said}");
        assert!(said.contains("refused") && said.contains("outside the roots"), "{said}");
        assert!(!exists(&escaped), "{roots:?}: nothing written outside");
        let (error, said) =
            mcp.exec(serde_json::json!({"cmd": "touch escaped", "workdir": "/etc"}));
        assert!(error && said.contains("refused"), "{roots:?}: /etc as workdir: {said}");
        assert!(!exists(Path::new("/etc/escaped")));
        // The exact mode of the server's policy (network not named: the server's `none`).
        let inside = s.work.join("inside");
        let (error, said) = mcp.exec(serde_json::json!({
            "cmd": format!("touch {}", inside.display()),
            "sandbox": {"mode": "workspace-write"},
        }));
        assert!(!error, "{roots:?}: the server's own mode is refused: {said}");
        assert!(exists(&inside), "{roots:?}: {said}");
        std::fs::remove_file(&inside).unwrap();
        // Asking for the network the server does not give is refused by the daemon.
        let (error, said) = mcp.exec(serde_json::json!({
            "cmd": "true",
            "sandbox": {"mode": "workspace-write", "network": "allow"},
        }));
        assert!(error && said.contains("network"), "{roots:?}: {said}");
    }
}

/// One HTTP/1.1 GET with the door's token: the status and the raw answer.
fn get(addr: SocketAddr, token: &str, path_and_query: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nX-Access-Token: {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), answer)
}

/// `/files` upload of `body` to `path` (octet-stream).
fn upload(addr: SocketAddr, token: &str, path: &Path) -> (u16, String) {
    let headers = [("X-Access-Token", token), ("Content-Type", "application/octet-stream")];
    http(addr, &format!("/files?path={}", path.display()), &headers, b"written")
}

/// A unary `filesystem.Filesystem/METHOD` of `path`.
fn fs_call(addr: SocketAddr, token: &str, method: &str, path: &Path) -> (u16, String) {
    let body = serde_json::to_vec(&serde_json::json!({ "path": path })).unwrap();
    let headers = [("X-Access-Token", token), ("Content-Type", "application/json")];
    http(addr, &format!("/filesystem.Filesystem/{method}"), &headers, &body)
}

/// The E2B file API is held to the daemon's hall like a command: Stockade's home (its token,
/// spools) is never reachable, not through a symlink or `..` either, and is left out of
/// listings; under `--sandbox read-only` nothing is written, under `workspace-write` only
/// beneath the writable roots — while reads elsewhere work.
#[test]
fn the_e2b_file_api_is_held_to_the_ceiling_and_never_reaches_the_home() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, outside) = (tmp.path().join("work"), tmp.path().join("outside"));
    for d in [&work, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    let w = work.to_str().unwrap();
    for ceiling in [
        &[][..],
        &["--sandbox", "read-only"],
        &["--sandbox", "workspace-write", "--writable-root", w],
    ] {
        let d = DaemonProc::start(&[&["--e2b", "127.0.0.1:0"][..], ceiling].concat());
        let (addr, token) = (d.e2b_addr(), read_token(&d.home.join("e2b-token")));
        let home = std::fs::canonicalize(&d.home).unwrap();
        // The home, its token, through a link and through `..`: refused, whatever the ceiling.
        let link = outside.join("to-home");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&home, &link).unwrap();
        // `outside/none/..` × (outside's depth + 1) is `/`: the home named from there.
        let up = "/..".repeat(outside.components().count());
        let climb = format!("{}/none{up}{}", outside.display(), home.display());
        for path in [
            home.join("e2b-token").display().to_string(),
            link.join("e2b-token").display().to_string(),
            format!("{climb}/e2b-token"),
        ] {
            let (status, answer) = get(addr, &token, &format!("/files?path={path}"));
            assert_eq!(status, 403, "{ceiling:?}: {path}: {answer}");
            assert!(!answer.contains(&token), "the token never leaves");
        }
        let (status, answer) = fs_call(addr, &token, "Stat", &home);
        assert_eq!(status, 403, "{ceiling:?}: {answer}");
        let (status, answer) = fs_call(addr, &token, "ListDir", home.parent().unwrap());
        assert_eq!(status, 200, "{answer}");
        let name = home.file_name().unwrap().to_str().unwrap();
        assert!(!answer.contains(&format!("\"{name}\"")), "the home is not listed: {answer}");
        let (status, answer) = fs_call(addr, &token, "Remove", home.parent().unwrap());
        assert_eq!(status, 403, "{ceiling:?}: removing what holds the home: {answer}");
        assert!(home.exists());
        // Reads outside the home work under every ceiling.
        std::fs::write(outside.join("readable"), "public").unwrap();
        let (status, answer) =
            get(addr, &token, &format!("/files?path={}/readable", outside.display()));
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("public"), "{answer}");
        // Writes: where the ceiling allows, and only there.
        let (out_file, in_file) = (outside.join("up"), work.join("up"));
        let (out_status, answer_out) = upload(addr, &token, &out_file);
        let (in_status, answer_in) = upload(addr, &token, &in_file);
        let (mk_status, _) = fs_call(addr, &token, "MakeDir", &outside.join("made"));
        match ceiling.get(1).copied() {
            None => {
                assert_eq!((out_status, in_status, mk_status), (200, 200, 200), "{answer_out}");
            }
            Some("read-only") => {
                assert_eq!((out_status, in_status, mk_status), (403, 403, 403), "{answer_in}");
                assert!(answer_out.contains("read-only"), "{answer_out}");
            }
            Some(_) => {
                assert_eq!((out_status, in_status, mk_status), (403, 200, 403), "{answer_in}");
                assert!(answer_out.contains("allows writes only beneath"), "{answer_out}");
            }
        }
        assert_eq!(exists(&out_file), out_status == 200);
        assert_eq!(exists(&in_file), in_status == 200);
        for p in [out_file, in_file] {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir(outside.join("made"));
    }
}

/// A sandboxed session with the network reaches the E2B door on loopback and gets nothing: the
/// door's token is hidden from it, and without the token neither `process.Process/Start` nor
/// `/files` does anything — so a command cannot start an unsandboxed twin through the door.
#[test]
fn a_sandboxed_session_gets_nothing_at_the_loopback_e2b_door() {
    let s = Sbx::new(User::Root);
    let mut child = s
        .cli(&["daemon", "run", "--e2b", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _daemon = Reaped(child);
    // The door's address, from the daemon's start lines (stderr drained to its end meanwhile).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        said.push_str(&line);
        said.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    let port = said
        .split("E2B door on http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .unwrap_or_else(|| panic!("the daemon names its E2B door:\n{said}"))
        .to_owned();
    let token_file = s.home.path().join("e2b-token");
    let escaped = s.outside.join("escaped-through-e2b");
    let script = format!(
        r#"
import urllib.request, urllib.error
try:
    open({file:?}).read(); print("token=allowed")
except OSError:
    print("token=denied")
def call(path, body, ctype):
    req = urllib.request.Request("http://127.0.0.1:{port}" + path, data=body, headers={{"Content-Type": ctype}})
    try:
        urllib.request.urlopen(req, timeout=20).read(); return "allowed"
    except urllib.error.HTTPError as e:
        return "denied" if e.code == 401 else "code%d" % e.code
body = b'{{"process":{{"cmd":"/bin/bash","args":["-c","touch {escaped}"]}}}}'
print("start=" + call("/process.Process/Start", bytes([0, 0, 0, 0, len(body)]) + body, "application/connect+json"))
print("files=" + call("/files?path={escaped}", b"x", "application/octet-stream"))
"#,
        file = token_file.display().to_string(),
        escaped = escaped.display(),
    );
    std::fs::write(s.work.join("knock.py"), script).unwrap();
    let policy = ["--sandbox", "workspace-write", "--network", "allow"];
    let (v, answer) = s.verdicts(&policy, "python3 knock.py");
    assert!(answer["sandbox"].as_str().is_some(), "{answer}");
    v.expect("denied", &["token", "start", "files"], User::Root);
    assert!(!exists(&escaped), "nothing ran or was written through the door: {answer}");
}

/// `kill --all` is one audit line that names every session it ended.
#[test]
fn kill_all_is_audited_with_the_ids_it_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let audit = tmp.path().join("audit.log");
    let d = DaemonProc::start(&["--audit-log", audit.to_str().unwrap()]);
    let cli = |args: &[&str]| cli_of(&d, args);
    let ids = [cli(&["run", "--bg", "-q", "sleep 100"]), cli(&["run", "--bg", "-q", "sleep 100"])];
    cli(&["kill", "--all"]);
    let line = eventually(Duration::from_secs(10), "the audit line of kill --all", || {
        let log = std::fs::read_to_string(&audit).ok()?;
        log.lines().find(|l| l.contains("\"kill_many\"")).map(str::to_owned)
    });
    let line: serde_json::Value = serde_json::from_str(&line).unwrap();
    let named: Vec<&str> =
        line["sessions"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    for id in &ids {
        assert!(named.contains(&id.as_str()), "{id} is named: {line}");
    }
}

/// The daemon's resident memory (`VmRSS`), in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap();
    kib * 1024
}

/// Three clients each pipeline 400 raw reads of 4 MiB (base64 in JSON) and read no answer: the
/// daemon holds at most each connection's answer budget, so its memory stays under 300 MiB
/// (it grew past 700 MiB from one such client before), comes back near idle once they go, and
/// its owner is served meanwhile.
#[test]
fn pipelined_large_reads_that_are_never_read_stay_within_the_budget() {
    use std::os::unix::net::UnixStream;
    let d = DaemonProc::start(&[]);
    let cli = |args: &[&str]| cli_of(&d, args);
    // 8 MiB of output to read from.
    let id = cli(&["run", "--bg", "-q", "head -c 6291456 /dev/zero | base64 -w 0"]);
    cli(&["wait", &id]);
    let idle = rss(d.pid);
    let request = |i: u64| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"read\",\"params\":{{\"id\":\"{id}\",\"raw\":true,\"after\":0,\"max_bytes\":4194304}}}}\n"
        )
    };
    let mut conns = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..3 {
        let s = UnixStream::connect(&d.socket).unwrap();
        let w = s.try_clone().unwrap();
        let body: String = (0..400).map(request).collect();
        writers.push(std::thread::spawn(move || {
            let mut w = w;
            // Blocks once the daemon stops reading; ends with an error when the test closes it.
            let _ = w.write_all(body.as_bytes());
        }));
        conns.push(s);
    }
    // Sample while the three are stalled: the daemon's memory with every budget full.
    let mut peak = 0;
    for _ in 0..40 {
        peak = peak.max(rss(d.pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The owner is served meanwhile.
    assert!(!cli(&["run", "-q", "--bg", "true"]).is_empty(), "a run answered");
    for s in &conns {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    drop(conns);
    for w in writers {
        w.join().unwrap();
    }
    eprintln!("daemon RSS: idle {} MiB, peak {} MiB", idle >> 20, peak >> 20);
    assert!(peak < 300 << 20, "peak {} MiB", peak >> 20);
    let settled = eventually(Duration::from_secs(20), "the daemon's memory back near idle", || {
        let now = rss(d.pid);
        (now < idle + (32 << 20)).then_some(now)
    });
    eprintln!("after: {} MiB", settled >> 20);
}

/// A schedule's tick starts a command with no client: it is still one audit line (door
/// `schedule`, the schedule's name, the command, the session) and one count of the spawn metric.
#[test]
fn a_schedules_fire_is_audited_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let audit = tmp.path().join("audit.log");
    let d =
        DaemonProc::start(&["--audit-log", audit.to_str().unwrap(), "--metrics", "127.0.0.1:0"]);
    let mut rpc = d.client();
    rpc.ok(
        "schedule.add",
        serde_json::json!({"name": "ticker", "every": "1s", "run": {"command": "echo scheduled-tick"}}),
    );
    let line = eventually(Duration::from_secs(20), "the audit line of a tick", || {
        let log = std::fs::read_to_string(&audit).ok()?;
        log.lines().find(|l| l.contains("\"door\":\"schedule\"")).map(str::to_owned)
    });
    let line: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["peer"], "schedule:ticker", "{line}");
    assert_eq!(line["command"], "echo scheduled-tick", "{line}");
    assert!(line["session"].as_str().is_some_and(|s| !s.is_empty()), "{line}");
    rpc.ok("schedule.remove", serde_json::json!({"name": "ticker"}));
    assert!(spawns(&d) >= 1, "the tick was counted");
}
