//! One rotation moves every network door: the WebSocket door, the E2B door, the `--metrics`
//! address (bound beyond loopback, so it asks for the token) and a `stockade mcp --http` server
//! given the same token file are all read again by one mechanism — a kubelet's `..data` swap is
//! seen by each within seconds, and SIGHUP reads the file again at once — after which the old
//! token is refused at all four and the new one let in at all four.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use stockade_testkit::{DaemonProc, eventually};

/// One HTTP/1.1 request with `Connection: close`; the status code (0 when none came).
fn status(addr: SocketAddr, request_head: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(addr) else { return 0 };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = format!(
        "{request_head} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).is_err() {
        return 0;
    }
    let mut answer = [0u8; 64];
    let n = s.read(&mut answer).unwrap_or(0);
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// The four doors of one test, and how each answers a token.
struct Doors {
    ws: SocketAddr,
    e2b: SocketAddr,
    metrics: SocketAddr,
    mcp: SocketAddr,
}

impl Doors {
    /// The status each door gives `token`: WebSocket upgrade, E2B stat, metrics scrape, MCP
    /// initialize (101/200 let in, 401 refused).
    fn answers(&self, token: &str) -> [u16; 4] {
        let bearer = format!("Bearer {token}");
        let ws = stockade_testkit::ws::connect(self.ws, Some(&bearer))
            .map(|_| 101)
            .unwrap_or_else(|_| stockade_testkit::ws::refused_status(self.ws, Some(&bearer)));
        let e2b = status(
            self.e2b,
            "POST /filesystem.Filesystem/Stat",
            &[("Content-Type", "application/json"), ("X-Access-Token", token)],
            r#"{"path":"/"}"#,
        );
        let metrics = status(self.metrics, "GET /metrics", &[("Authorization", &bearer)], "");
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"rotation","version":"1"}}}"#;
        let mcp = status(
            self.mcp,
            "POST /mcp",
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            initialize,
        );
        [ws, e2b, metrics, mcp]
    }

    /// Waits (bounded) until all four let `new` in, then asserts all four refuse `old`.
    fn moved(&self, old: &str, new: &str, how: &str) {
        eventually(Duration::from_secs(10), &format!("{how}: the new token at every door"), || {
            (self.answers(new) == [101, 200, 200, 200]).then_some(())
        });
        assert_eq!(self.answers(old), [401; 4], "{how}: the old token refused at every door");
    }
}

/// `stockade mcp --http 127.0.0.1:0` for the daemon's home: the child and its address.
struct McpHttp(Child, SocketAddr);

impl Drop for McpHttp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mcp_http(home: &Path, token_file: &Path) -> McpHttp {
    let mut child = Command::new(stockade_testkit::stockade_bin())
        .arg("--home")
        .arg(home)
        .args(["mcp", "--http", "127.0.0.1:0", "--token-file"])
        .arg(token_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("http://").nth(1) {
                let _ = tx.send(rest.split('/').next().unwrap_or_default().to_owned());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)).map(|a| a.parse::<SocketAddr>()) {
        Ok(Ok(addr)) => McpHttp(child, addr),
        said => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stockade mcp --http did not name its address: {said:?}");
        }
    }
}

/// Writes `token` as the kubelet writes a Secret: `..<version>/token`, `..data` renamed over to
/// point at it, `token` a symlink through `..data`.
fn kubelet_writes(dir: &Path, version: u32, token: &str) {
    let data = dir.join(format!("..v{version}"));
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("token"), format!("{token}\n")).unwrap();
    std::fs::set_permissions(data.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    if version > 1 {
        std::fs::remove_dir_all(dir.join(format!("..v{}", version - 1))).unwrap();
    } else {
        std::os::unix::fs::symlink("..data/token", dir.join("token")).unwrap();
    }
}

#[test]
fn one_swap_or_one_sighup_moves_all_four_doors_together() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let first = "first-token-0123456789abcdef";
    kubelet_writes(&secret, 1, first);
    let file = secret.join("token");
    let f = file.to_str().unwrap();
    let d = DaemonProc::start(&[
        "--ws",
        "127.0.0.1:0",
        "--e2b",
        "127.0.0.1:0",
        "--metrics",
        "0.0.0.0:0",
        "--insecure-plaintext",
        "--token-file",
        f,
    ]);
    let said = d.stderr.lock().unwrap().clone();
    let metrics_port: u16 = said
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .map(|a| a.port())
        .unwrap_or_else(|| panic!("the ready line names the metrics address: {said}"));
    let mcp = mcp_http(&d.home, &file);
    let doors = Doors {
        ws: d.ws_addr(),
        e2b: d.e2b_addr(),
        metrics: SocketAddr::from(([127, 0, 0, 1], metrics_port)),
        mcp: mcp.1,
    };
    assert_eq!(doors.answers(first), [101, 200, 200, 200], "the first token everywhere");
    assert_eq!(doors.answers("never-the-token-0123456789"), [401; 4], "a wrong one nowhere");

    // The kubelet's swap, and nothing else: each door sees the file change.
    let second = "second-token-0123456789abcdef";
    kubelet_writes(&secret, 2, second);
    doors.moved(first, second, "after the ..data swap");

    // Written in place, then one SIGHUP to each process: read again at once.
    let third = "third-token-0123456789abcdef";
    std::fs::write(secret.join("..v2/token"), format!("{third}\n")).unwrap();
    for pid in [d.pid, mcp.0.id()] {
        // SAFETY: kill(2) of this test's own daemon and MCP server.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) }, 0);
    }
    doors.moved(second, third, "after SIGHUP");
}
