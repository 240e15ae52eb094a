//! Shared by the `client_*` tests: a temporary state directory whose daemon is stopped, and then
//! killed by pid with its sessions' process groups, when the test ends — even on failure.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Generous bound for anything the tests wait for (a bound, never a speed assertion).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A temporary `STOCKADE_HOME` with its daemon cleaned up on drop.
pub struct Home {
    dir: tempfile::TempDir,
    pgids: RefCell<Vec<i32>>,
}

impl Home {
    pub fn new() -> Home {
        Home { dir: tempfile::tempdir().unwrap(), pgids: RefCell::new(Vec::new()) }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `stockade ARGS` for this home (auto-start on, logging quiet).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stockade"));
        c.args(args)
            .env("STOCKADE_HOME", self.path())
            .env_remove("STOCKADE_NO_AUTOSTART")
            .env_remove("STOCKADE_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("the stockade binary runs")
    }

    /// Run, insist on success, return stdout as text.
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

    /// Run with `--json`, insist on success, parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Run (args already carry `--json`), insist on success, parse stdout.
    pub fn json_first(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// Start a background session; remember its process group for the cleanup.
    pub fn run_bg(&self, command: &str) -> Value {
        let result = self.json_first(&["run", "--bg", "--json", command]);
        assert_eq!(result["state"], "running", "{result}");
        self.session(result["id"].as_str().unwrap());
        result
    }

    /// The session as `ps --json` lists it (and remember its process group).
    pub fn session(&self, id: &str) -> Value {
        let list = self.json(&["ps"]);
        let s = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{id} not in {list}"))
            .clone();
        if let Some(pgid) = s["pgid"].as_i64().filter(|&p| p > 1) {
            self.pgids.borrow_mut().push(pgid as i32);
        }
        s
    }

    /// Wait (bounded) until `ps` shows the session in a terminal state; return it.
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

    /// The daemon's pid, from its lock file.
    pub fn daemon_pid(&self) -> Option<u32> {
        stockade_client::daemon_pid(self.path())
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // While the daemon still answers, learn every session's process group.
        if let Ok(out) = self.cmd(&["--no-autostart", "ps", "--json"]).output()
            && let Ok(list) = serde_json::from_slice::<Value>(&out.stdout)
        {
            for s in list["sessions"].as_array().into_iter().flatten() {
                if let Some(pgid) = s["pgid"].as_i64().filter(|&p| p > 1) {
                    self.pgids.borrow_mut().push(pgid as i32);
                }
            }
        }
        let pid = self.daemon_pid();
        let _ = self.cmd(&["daemon", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        if let Some(pid) = pid.filter(|&p| stockade_client::pid_alive(p)) {
            // SAFETY: kill(2) with a pid this test's daemon wrote into its own lock file.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
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

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The session's `STOCKADE_SESSION` marker, `<instance>:<id>`, from its spool path
/// (`…/spool/<instance>/<id>/output.log`).
pub fn marker(spool_path: &str) -> String {
    let path = PathBuf::from(spool_path);
    let id_dir = path.parent().unwrap();
    let instance = id_dir.parent().unwrap().file_name().unwrap().to_str().unwrap();
    format!("{instance}:{}", id_dir.file_name().unwrap().to_str().unwrap())
}

/// Live (non-zombie) processes whose environment carries `STOCKADE_SESSION=<marker>`.
pub fn marked_pids(marker: &str) -> Vec<u32> {
    let wanted = format!("STOCKADE_SESSION={marker}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|var| var == wanted.as_bytes())
            && stockade_client::pid_alive(pid)
        {
            pids.push(pid);
        }
    }
    pids
}

/// Live processes that are a daemon for `home` (`stockade --home HOME daemon run`).
pub fn daemons_for(home: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let home = home.as_os_str().as_encoded_bytes();
        if args.windows(2).any(|w| w[0] == b"--home" && w[1] == home)
            && args.windows(2).any(|w| w[0] == b"daemon" && w[1] == b"run")
            && stockade_client::pid_alive(pid)
        {
            pids.push(pid);
        }
    }
    pids
}
