//! What the sandbox tests share: a home whose daemon the CLI auto-starts, a workspace (the
//! session's working directory, so a writable root) and a directory outside it, both for root
//! and for an unprivileged user (`nobody`, through `setpriv`) whose home, workspace and outside
//! directory are writable to it without the sandbox — so each denial is the sandbox's.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use stockade_testkit::child::{STOP_TIMEOUT, wait_bounded};
use stockade_testkit::{Home, cannot_run, stockade_bin, text};

pub const NOBODY: u32 = 65534;

/// Who runs the CLI (and so the daemon it starts, and every command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    Root,
    Nobody,
}

/// Both users, where this machine can switch to `nobody` (root and `setpriv`); a test that
/// cannot run as `nobody` says so (and fails under CI).
pub fn users() -> Vec<User> {
    let root = rustix::process::geteuid().is_root();
    let setpriv =
        Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    if root && setpriv {
        vec![User::Root, User::Nobody]
    } else {
        cannot_run("the sandbox tests run as root and as nobody: they need root and setpriv");
        vec![]
    }
}

/// A home, a workspace and an outside directory for `user`.
pub struct Sbx {
    pub user: User,
    pub home: Home,
    pub work: PathBuf,
    pub outside: PathBuf,
    _dirs: tempfile::TempDir,
}

impl Sbx {
    pub fn new(user: User) -> Sbx {
        let home = Home::nested("state");
        let dirs = tempfile::Builder::new().prefix("stockade-sbx-").tempdir().unwrap();
        let work = dirs.path().join("work");
        let outside = dirs.path().join("outside");
        for d in [&work, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::create_dir(home.path()).unwrap();
        if user == User::Nobody {
            for d in [dirs.path(), home.root()] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            for d in [home.path(), &work, &outside] {
                std::os::unix::fs::chown(d, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        Sbx { user, home, work, outside, _dirs: dirs }
    }

    /// `stockade ARGS` as this user, from the workspace, with this home: how a user's shell runs
    /// it (the daemon it auto-starts lives on in another directory).
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = match self.user {
            User::Root => Command::new(stockade_bin()),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(stockade_bin());
                c
            }
        };
        c.args(args)
            .current_dir(&self.work)
            .env("STOCKADE_HOME", self.home.path())
            .env_remove("STOCKADE_NO_AUTOSTART")
            .env_remove("STOCKADE_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub fn output(&self, args: &[&str]) -> Output {
        self.cli(args).output().expect("the stockade binary runs")
    }

    /// `run --bg --json` with `policy` flags of `script` (through `sh -c`), answered when it
    /// ends; the answer.
    pub fn run(&self, policy: &[&str], script: &str) -> Value {
        let mut args = vec!["run", "--bg", "--json", "--yield-ms", "60000"];
        args.extend(policy);
        args.extend(["--", "sh", "-c", script]);
        let out = self.output(&args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{args:?} answered no JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr))
        })
    }

    /// Runs `script` (with [`TRY`] defined) under `policy`; the verdicts it printed.
    pub fn verdicts(&self, policy: &[&str], script: &str) -> (Verdicts, Value) {
        let answer = self.run(policy, &format!("{TRY}\n{script}"));
        let out = answer["output"].as_str().unwrap_or_default();
        (Verdicts::of(out), answer)
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> u32 {
        self.home.daemon_pid().expect("a daemon runs")
    }
}

impl Drop for Sbx {
    fn drop(&mut self) {
        // The home's own clean-up runs as root; a daemon of nobody's answers only nobody.
        if self.user == User::Nobody
            && let Ok(mut child) = self
                .cli(&["--no-autostart", "daemon", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        {
            wait_bounded(&mut child, STOP_TIMEOUT);
        }
    }
}

/// `t NAME CMD…`: runs CMD, prints `NAME=allowed` or `NAME=denied`.
pub const TRY: &str = r#"t() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$n=allowed"; else echo "$n=denied"; fi; }"#;

/// What a script's attempts came to.
pub struct Verdicts(BTreeMap<String, String>, String);

impl Verdicts {
    /// The verdicts (`NAME=allowed`, `NAME=denied` lines) in a run's output.
    pub fn of(out: &str) -> Verdicts {
        let mut v = BTreeMap::new();
        for line in out.lines() {
            if let Some((name, verdict)) = line.split_once('=')
                && (verdict == "allowed" || verdict == "denied")
            {
                v.insert(name.to_owned(), verdict.to_owned());
            }
        }
        Verdicts(v, out.to_owned())
    }

    /// Insists that each of `names` came to `verdict`.
    pub fn expect(&self, verdict: &str, names: &[&str], who: User) {
        for name in names {
            assert_eq!(
                self.0.get(*name).map(String::as_str),
                Some(verdict),
                "{name} as {who:?}: expected {verdict}; the output was:\n{}",
                self.1
            );
        }
    }
}

/// A file's existence, for markers a denied attempt must not have made.
pub fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// `/usr/bin/python3`, which `nobody` can run too; says so when missing.
pub fn python() -> Option<&'static str> {
    if Path::new("/usr/bin/python3").exists() {
        Some("/usr/bin/python3")
    } else {
        cannot_run("these attempts are made with /usr/bin/python3, which is missing");
        None
    }
}

impl Sbx {
    /// `run --bg --json --yield-ms 0` with `policy` of `script`: the answer of a started session.
    pub fn run_started(&self, policy: &[&str], script: &str) -> Value {
        let mut args = vec!["run", "--bg", "--json", "--yield-ms", "0"];
        args.extend(policy);
        args.extend(["--", "sh", "-c", script]);
        let out = self.output(&args);
        let answer: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?} answered no JSON ({e}): {}", text(&out.stderr)));
        assert_eq!(answer["state"], "running", "{answer}");
        answer
    }
}
