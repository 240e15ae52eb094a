//! The MCP clients the `mcp` tests drive, which `scripts/test` installs (the official Python SDK
//! in `target/mcp-venv`, the MCP Inspector in `target/mcp-node`), against a [`Home`]'s
//! `stockade mcp` over stdio or a `stockade mcp --http` server; every client run is bounded.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::child::{Finished, STOP_TIMEOUT, run_bounded, wait_bounded};
use crate::home::{Home, quiet};
use crate::{repo_root, stockade_bin};

/// Bound on one client run (a scenario, one Inspector call).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

fn installed(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run the tests with ./scripts/test, which installs it",
        path.display()
    );
    path
}

/// The venv's python, with the `mcp` SDK.
fn python() -> PathBuf {
    installed(repo_root().join("target/mcp-venv/bin/python"), "the MCP Python SDK")
}

/// `tests/mcp/scenarios.py`.
fn scenarios() -> PathBuf {
    repo_root().join("tests/mcp/scenarios.py")
}

/// The npm prefix holding the MCP Inspector.
fn inspector_prefix() -> PathBuf {
    let prefix = repo_root().join("target/mcp-node");
    installed(prefix.join("node_modules/.bin/mcp-inspector"), "the MCP Inspector");
    prefix
}

impl Home {
    /// Run a `tests/mcp/scenarios.py` scenario over stdio (it starts `stockade mcp` itself).
    pub fn python_stdio(&self, scenario: &str, mcp_args: &[&str]) -> Finished {
        let mut c = Command::new(python());
        c.arg(scenarios()).arg(scenario).args([
            "--stockade",
            stockade_bin().to_str().unwrap(),
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
            .args(["mcp-inspector", "--cli"])
            .arg(stockade_bin())
            .args(["--home", self.path_str(), "mcp", "--structured"])
            .args(args)
            // Its catalog of servers goes here rather than into ~/.mcp-inspector.
            .env("MCP_CATALOG_PATH", self.path().join("inspector-catalog.json"))
            .env("NO_COLOR", "1");
        quiet(&mut c);
        run_bounded(&mut c, CLIENT_TIMEOUT)
    }
}

/// `stockade mcp --http 127.0.0.1:0 …` running in the background; SIGTERM, then SIGKILL by pid,
/// on drop.
pub struct HttpServer {
    child: Child,
    /// Where it serves MCP (`http://127.0.0.1:<port>/mcp`).
    pub url: String,
    /// Its `host:port`.
    pub addr: String,
}

impl HttpServer {
    /// Starts it for `home` with `extra` arguments and waits (bounded) for its address.
    pub fn start(home: &Home, extra: &[&str]) -> HttpServer {
        let mut args = vec!["mcp", "--structured", "--http", "127.0.0.1:0"];
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

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
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
