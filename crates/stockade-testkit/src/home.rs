//! A temporary state directory (`STOCKADE_HOME`) for tests that drive the `stockade` binary,
//! whose daemon is stopped — and then killed by pid, with its sessions' process groups — when
//! the test ends, even on failure.

use std::cell::RefCell;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::child::{STOP_TIMEOUT, wait_bounded};
use crate::{PATIENCE, stockade_bin, text};

/// A temporary home with its daemon cleaned up on drop.
pub struct Home {
    dir: tempfile::TempDir,
    path: std::path::PathBuf,
    pgids: RefCell<Vec<i32>>,
}

impl Default for Home {
    fn default() -> Home {
        Home::new()
    }
}

impl Home {
    /// A fresh, empty home.
    pub fn new() -> Home {
        Home::nested("")
    }

    /// A home at `rel` inside a fresh temporary directory ([`Home::root`]), for programs that
    /// find the state directory themselves (`$HOME/.local/state/stockade`).
    pub fn nested(rel: &str) -> Home {
        let dir = tempfile::Builder::new().prefix("stockade-test-").tempdir().unwrap();
        let path = if rel.is_empty() { dir.path().to_owned() } else { dir.path().join(rel) };
        Home { dir, path, pgids: RefCell::new(Vec::new()) }
    }

    /// The temporary directory it lives in (its own path unless [`Home::nested`]).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its path as text (for argument lists).
    pub fn path_str(&self) -> &str {
        self.path().to_str().unwrap()
    }

    /// `stockade ARGS` for this home through `STOCKADE_HOME` (auto-start on, default logging,
    /// no colour), as a user's shell would run it.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(stockade_bin());
        c.args(args)
            .env("STOCKADE_HOME", self.path())
            .env_remove("STOCKADE_NO_AUTOSTART")
            .env_remove("STOCKADE_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// `stockade --home H ARGS`, quiet (errors only), with no inherited home, auto-start
    /// switch or MCP token: how an MCP client configuration starts it.
    pub fn stockade(&self, args: &[&str]) -> Command {
        let mut c = Command::new(stockade_bin());
        c.arg("--home").arg(self.path()).args(args);
        quiet(&mut c);
        c
    }

    /// Runs `stockade ARGS` ([`Home::cmd`]) to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("the stockade binary runs")
    }

    /// Runs, insists on success, returns stdout as text.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "stockade {args:?} failed ({:?}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Runs with `--json`, insists on success, parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Runs (args already carry `--json`), insists on success, parses stdout.
    pub fn json_first(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// `stockade run --bg --json ARGS…` for a command that may have ended by the answer: the CLI
    /// then exits with the command's own code (a signal or another end: 1), else 0. Checks that
    /// the exit status matches the answer; returns the answer.
    pub fn json_bg(&self, args: &[&str]) -> Value {
        self.json_started(&[&["run", "--bg", "--json"][..], args].concat())
    }

    /// `stockade ARGS…` (`--json` included) that starts a command in the background (`run --bg`,
    /// `restart`), which may have ended by the answer: as [`Home::json_bg`].
    pub fn json_started(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        let answer: Value = serde_json::from_str(&text(&out.stdout))
            .unwrap_or_else(|e| panic!("{args:?} answered no JSON ({e}): {}", text(&out.stderr)));
        let code = out.status.code();
        match answer["state"].as_str() {
            Some("running") => assert_eq!(code, Some(0), "{answer}"),
            Some("exited") => {
                assert_eq!(code.map(i64::from), answer["code"].as_i64(), "{answer}");
            }
            _ => assert_ne!(code, Some(0), "{answer}"),
        }
        answer
    }

    /// Starts a background session; remembers its process group for the cleanup.
    pub fn run_bg(&self, command: &str) -> Value {
        let result = self.json_first(&["run", "--bg", "--json", command]);
        assert_eq!(result["state"], "running", "{result}");
        self.session(result["id"].as_str().unwrap());
        result
    }

    /// The session as `ps --json` lists it (and remembers its process group).
    pub fn session(&self, id: &str) -> Value {
        let list = self.json(&["ps"]);
        let s = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{id} not in {list}"))
            .clone();
        self.remember(&s);
        s
    }

    /// Waits (bounded) until `ps` shows the session in a terminal state; returns it.
    pub fn wait_finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let s = self.session(id);
            if s["state"] != "running" {
                return s;
            }
            assert!(Instant::now() < deadline, "{id} still running: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's pid, from its lock file, if one is (or was) running.
    pub fn daemon_pid(&self) -> Option<u32> {
        stockade_client::daemon_pid(self.path())
    }

    fn remember(&self, session: &Value) {
        if let Some(pgid) = session["pgid"].as_i64().filter(|&p| p > 1) {
            self.pgids.borrow_mut().push(pgid as i32);
        }
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // While the daemon still answers, learn every session's process group.
        if let Ok(out) = self.cmd(&["--no-autostart", "ps", "--json"]).output()
            && let Ok(list) = serde_json::from_slice::<Value>(&out.stdout)
        {
            for s in list["sessions"].as_array().into_iter().flatten() {
                self.remember(s);
            }
        }
        let pid = self.daemon_pid();
        let mut stop = self.stockade(&["--no-autostart", "daemon", "stop"]);
        stop.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        if let Ok(mut child) = stop.spawn() {
            wait_bounded(&mut child, STOP_TIMEOUT);
        }
        if let Some(pid) = pid {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while stockade_procfs::pid_alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if stockade_procfs::pid_alive(pid) {
                // SAFETY: kill(2) with a pid this test's daemon wrote into its own lock file.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        for &pgid in self.pgids.borrow().iter() {
            // SAFETY: kill(2) of a process group this test's daemon created for a session.
            unsafe {
                if libc::kill(-pgid, 0) == 0 {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
    }
}

/// No inherited home, auto-start switch or MCP token; logging at `error`.
pub(crate) fn quiet(c: &mut Command) {
    c.env_remove("STOCKADE_HOME")
        .env_remove("STOCKADE_NO_AUTOSTART")
        .env_remove("STOCKADE_MCP_TOKEN")
        .env("STOCKADE_LOG", "error");
}
