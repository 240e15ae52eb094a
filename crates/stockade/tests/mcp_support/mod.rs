//! Shared by the `mcp_*` tests: the MCP clients `scripts/test` installs (the official Python SDK
//! in `target/mcp-venv`, the MCP Inspector in `target/mcp-node`), a temporary state directory
//! whose daemon is stopped and then killed by pid when the test ends (even on failure), and
//! bounded waits for every child process.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on one client run (a scenario, one Inspector call).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);
/// Bound on stopping a server or a daemon before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

pub fn stockade_bin() -> &'static str {
    env!("CARGO_BIN_EXE_stockade")
}

/// The workspace root (`tests/mcp/` and `target/mcp-*` live there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn installed(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run the tests with ./scripts/test, which installs it",
        path.display()
    );
    path
}

/// The venv's python, with the `mcp` SDK.
pub fn python() -> PathBuf {
    installed(repo_root().join("target/mcp-venv/bin/python"), "the MCP Python SDK")
}

/// `tests/mcp/scenarios.py`.
pub fn scenarios() -> PathBuf {
    repo_root().join("tests/mcp/scenarios.py")
}

/// The npm prefix holding the MCP Inspector.
pub fn inspector_prefix() -> PathBuf {
    let prefix = repo_root().join("target/mcp-node");
    installed(prefix.join("node_modules/.bin/mcp-inspector"), "the MCP Inspector");
    prefix
}

/// What a bounded run produced.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what} failed ({:?})\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

/// Run `cmd` to the end, killing it (and failing the test) after `timeout`.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Finished {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_bounded(&mut child, timeout);
    let stdout = out.recv_timeout(STOP_TIMEOUT).unwrap_or_default();
    let stderr = err.recv_timeout(STOP_TIMEOUT).unwrap_or_default();
    match status {
        Some(status) => Finished { status, stdout, stderr },
        None => panic!(
            "{cmd:?} did not finish within {timeout:?}; killed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        ),
    }
}

/// Wait for `child` up to `timeout`; on overrun kill it (SIGKILL, by its pid) and return `None`.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary `--home` whose daemon is stopped on drop (`daemon stop`, then SIGKILL by the pid
/// in `daemon.lock` if it is still there). Never kills by name.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        Home { dir: tempfile::Builder::new().prefix("stockade-mcp-test-").tempdir().unwrap() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn path_str(&self) -> &str {
        self.path().to_str().unwrap()
    }

    /// `stockade --home H ARGS`, quiet.
    pub fn stockade(&self, args: &[&str]) -> Command {
        let mut c = Command::new(stockade_bin());
        c.arg("--home").arg(self.path()).args(args);
        quiet(&mut c);
        c
    }

    /// Run a `tests/mcp/scenarios.py` scenario over stdio (it starts `stockade mcp` itself).
    pub fn python_stdio(&self, scenario: &str, mcp_args: &[&str]) -> Finished {
        let mut c = Command::new(python());
        c.arg(scenarios()).arg(scenario).args([
            "--stockade",
            stockade_bin(),
            "--home",
            self.path_str(),
        ]);
        for a in mcp_args {
            c.arg(format!("--mcp-arg={a}"));
        }
        quiet(&mut c);
        run_bounded(&mut c, CLIENT_TIMEOUT)
    }

    /// The MCP Inspector's CLI mode against `stockade --home H mcp` over stdio.
    pub fn inspector(&self, args: &[&str]) -> Finished {
        let mut c = Command::new("npx");
        c.arg("--prefix")
            .arg(inspector_prefix())
            .args(["mcp-inspector", "--cli", stockade_bin(), "--home", self.path_str(), "mcp"])
            .args(args)
            // Its catalog of servers goes here rather than into ~/.mcp-inspector.
            .env("MCP_CATALOG_PATH", self.path().join("inspector-catalog.json"))
            .env("NO_COLOR", "1");
        quiet(&mut c);
        run_bounded(&mut c, CLIENT_TIMEOUT)
    }

    /// The pid of this home's daemon, if one is (or was) running.
    pub fn daemon_pid(&self) -> Option<u32> {
        stockade_client::daemon_pid(self.path())
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let pid = self.daemon_pid();
        let mut stop = self.stockade(&["--no-autostart", "daemon", "stop"]);
        stop.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        if let Ok(mut child) = stop.spawn() {
            wait_bounded(&mut child, STOP_TIMEOUT);
        }
        if let Some(pid) = pid {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while stockade_client::pid_alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if stockade_client::pid_alive(pid) {
                // SAFETY: kill(2) with a pid we read from this test's own daemon.lock.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}

fn quiet(c: &mut Command) {
    c.env_remove("STOCKADE_HOME")
        .env_remove("STOCKADE_NO_AUTOSTART")
        .env_remove("STOCKADE_MCP_TOKEN")
        .env("STOCKADE_LOG", "error");
}

/// `stockade mcp --http 127.0.0.1:0 …` running in the background; SIGTERM, then SIGKILL by pid,
/// on drop.
pub struct HttpServer {
    child: Child,
    pub url: String,
    pub addr: String,
}

impl HttpServer {
    pub fn start(home: &Home, extra: &[&str]) -> HttpServer {
        let mut args = vec!["mcp", "--http", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut child = home
            .stockade(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("stockade mcp --http starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = match rx.recv_timeout(STOP_TIMEOUT) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("stockade mcp --http did not say where it listens");
            }
        };
        let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        HttpServer { child, url, addr }
    }

    /// Run a scenario against this server.
    pub fn python(&self, scenario: &str, token: Option<&str>) -> Finished {
        let mut c = Command::new(python());
        c.arg(scenarios()).arg(scenario).args(["--url", &self.url]);
        if let Some(t) = token {
            c.args(["--token", t]);
        }
        quiet(&mut c);
        run_bounded(&mut c, CLIENT_TIMEOUT)
    }

    /// Stop with SIGTERM and wait (bounded); the exit status, if it stopped by itself.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        wait_bounded(&mut self.child, STOP_TIMEOUT)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}
