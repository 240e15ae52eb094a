//! The Python client (python/stockade, imported from the source tree) against the real binary:
//! `run` uses the caller's directory and environment as `subprocess.run` does, a Ctrl-C during
//! `run` terminates the command, the client goes on after its daemon was stopped and started
//! again, and wrong arguments get a sentence naming them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_testkit::child::{Finished, run_bounded, wait_bounded};
use stockade_testkit::{Home, procs, stockade_bin, text};

/// Bound on one Python program.
const PROGRAM: Duration = Duration::from_secs(60);

fn python_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

/// `python3 -c SCRIPT HOME BINARY` with the client importable, run from `dir`.
fn python(script: &str, home: &Home, dir: &std::path::Path) -> Command {
    let mut c = Command::new("python3");
    c.args(["-c", script, home.path_str(), stockade_bin().to_str().unwrap()])
        .current_dir(dir)
        .env("PYTHONPATH", python_source())
        .env_remove("STOCKADE_HOME")
        .stdin(Stdio::null());
    c
}

/// A child killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn output(mut c: Command) -> Finished {
    run_bounded(&mut c, PROGRAM)
}

const CALLERS_WORLD: &str = r#"
import json, os, sys
from stockade import Client
home, binary = sys.argv[1], sys.argv[2]
os.makedirs("sub", exist_ok=True)
os.environ["PROJECT_VAR"] = "from-the-caller"
with Client(home, binary=binary) as c:
    here = c.run('pwd; echo "$PROJECT_VAR $EXTRA"', env={"EXTRA": "extra"}).output
    sub = c.run("pwd", cwd="sub").output
    errors = []
    for bad in [lambda: c.run(42), lambda: c.run("true", env={"A": 1}),
                lambda: c.run("true", timeout="5"), lambda: c.run("true", cwd=3)]:
        try:
            bad()
        except (TypeError, ValueError) as e:
            errors.append(str(e))
print(json.dumps({"here": here, "sub": sub, "errors": errors}))
"#;

#[test]
fn python_run_uses_the_callers_directory_and_environment() {
    let home = Home::new();
    // The daemon starts elsewhere, with another environment.
    let out = home
        .cmd(&["daemon", "start"])
        .current_dir("/")
        .env("PROJECT_VAR", "daemon's")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let work = tempfile::tempdir().unwrap();
    let work_path = work.path().canonicalize().unwrap();
    let out = output(python(CALLERS_WORLD, &home, &work_path));
    assert!(out.status.success(), "{}", out.stderr);
    let got: Value = serde_json::from_str(&out.stdout).unwrap();
    let dir = work_path.display();
    assert_eq!(got["here"], format!("{dir}\nfrom-the-caller extra\n"), "{got}");
    assert_eq!(got["sub"], format!("{dir}/sub\n"), "{got}");
    let errors: Vec<&str> =
        got["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(errors.len(), 4, "{got}");
    for (error, argument) in errors.iter().zip(["command", "env", "timeout", "cwd"]) {
        assert!(error.starts_with(&format!("{argument} must")), "{error}");
    }
}

const INTERRUPTED: &str = r#"
import sys
from stockade import Client
home, binary = sys.argv[1], sys.argv[2]
c = Client(home, binary=binary)
print("running", flush=True)
try:
    c.run("echo interrupted-run; sleep 100")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"#;

#[test]
fn ctrl_c_during_python_run_terminates_the_command() {
    let home = Home::new();
    let work = tempfile::tempdir().unwrap();
    let mut child = python(INTERRUPTED, &home, work.path());
    let child = child.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let mut child = Reaped(child);
    let mut line = String::new();
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "running\n");
    let session = running_session(&home, "echo interrupted-run; sleep 100");
    let root = home.session(&session)["pid"].as_u64().unwrap() as u32;
    // SAFETY: kill(2) on the Python process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "interrupted\n");
    let status = wait_bounded(&mut child.0, PROGRAM).expect("Python ended after the interrupt");
    assert_eq!(status.code(), Some(130));
    // By the time run() raised, the command's tree was verified gone.
    let all = home.json(&["ps", "--all"]);
    let state = all["sessions"].as_array().unwrap().iter().find(|s| s["id"] == session).unwrap();
    assert_ne!(state["state"], "running", "{state}");
    assert!(!procs::pid_alive(root), "the command's process {root} is still there");
}

/// The running session whose command is `cmd`, waited for (bounded).
fn running_session(home: &Home, cmd: &str) -> String {
    let deadline = Instant::now() + PROGRAM;
    loop {
        let list = home.json(&["ps"]);
        let found = list["sessions"].as_array().unwrap().iter().find(|s| s["command"] == cmd);
        if let Some(s) = found {
            return s["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no session for {cmd}: {list}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const RESTARTED: &str = r#"
import subprocess, sys
from stockade import Client
home, binary = sys.argv[1], sys.argv[2]
c = Client(home, binary=binary)
print(c.run("echo before").output, end="", flush=True)
subprocess.run([binary, "--home", home, "daemon", "stop"], check=True, capture_output=True)
print(c.run("echo after").output, end="", flush=True)
print(c.status()["pid"], flush=True)
"#;

#[test]
fn the_python_client_goes_on_after_its_daemon_restarts() {
    let home = Home::new();
    let work = tempfile::tempdir().unwrap();
    let out = output(python(RESTARTED, &home, work.path()));
    assert!(out.status.success(), "{}", out.stderr);
    let stdout = out.stdout;
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[..2], ["before", "after"], "{stdout}");
    let pid: u32 = lines[2].parse().unwrap();
    assert_eq!(home.daemon_pid(), Some(pid), "the client reached the new daemon");
}

const ASYNC: &str = r#"
import asyncio, subprocess, sys
from stockade import AsyncClient
home, binary = sys.argv[1], sys.argv[2]
cmd = "echo cancelled-run; sleep 100"
async def main() -> None:
    async with AsyncClient(home, binary=binary) as c:
        print((await c.run("echo before")).output, end="")
        subprocess.run([binary, "--home", home, "daemon", "stop"], check=True, capture_output=True)
        print((await c.run("echo after")).output, end="")
        task = asyncio.create_task(c.run(cmd))
        while not any(s["command"] == cmd for s in await c.sessions()):
            await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            print("cancelled")
        print([s["state"] for s in await c.sessions() if s["command"] == cmd][0])
asyncio.run(main())
"#;

#[test]
fn the_async_client_goes_on_after_a_restart_and_a_cancelled_run_ends() {
    let home = Home::new();
    let work = tempfile::tempdir().unwrap();
    let out = output(python(ASYNC, &home, work.path()));
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "before\nafter\ncancelled\nkilled\n", "{}", out.stderr);
}

#[test]
fn the_python_client_and_its_docs_examples_pass_mypy_strict() {
    let mypy = python_source().join("../target/mypy-venv/bin/mypy");
    if !mypy.exists() {
        stockade_testkit::cannot_run("no mypy: run tests/packaging/install-deps.sh");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let doc = std::fs::read_to_string(python_source().join("../docs/clients.md")).unwrap();
    let mut files = vec![python_source().join("stockade").to_str().unwrap().to_owned()];
    for (i, block) in doc.split("```python\n").skip(1).enumerate() {
        let path = dir.path().join(format!("example{i}.py"));
        std::fs::write(&path, block.split("```").next().unwrap()).unwrap();
        files.push(path.to_str().unwrap().to_owned());
    }
    assert!(files.len() > 1, "no ```python block in docs/clients.md");
    let mut check = Command::new(mypy);
    // websockets is imported only for a remote daemon; its types are not needed here.
    check.args(["--strict", "--ignore-missing-imports"]).args(&files);
    check.env("MYPYPATH", python_source()).current_dir(dir.path());
    let out = run_bounded(&mut check, PROGRAM);
    assert!(out.status.success(), "mypy --strict: {}{}", out.stdout, out.stderr);
}

/// A wheel as maturin makes it (tagged manylinux_2_17 only), with one script, written by
/// Python's zipfile.
const MAKE_WHEEL: &str = r##"
import base64, hashlib, sys, zipfile
out = sys.argv[1]
di = "demo-0.1.0.dist-info"
files = {f"{di}/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 0.1.0\n",
         f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_17_x86_64\n",
         "demo-0.1.0.data/scripts/demo": "#!/bin/sh\necho demo\n"}
record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b'=').decode()},{len(v)}" for k, v in files.items()]
files[f"{di}/RECORD"] = "\n".join(record + [f"{di}/RECORD,,"]) + "\n"
with zipfile.ZipFile(f"{out}/demo-0.1.0-py3-none-manylinux_2_17_x86_64.whl", "w") as z:
    for k, v in files.items():
        z.writestr(k, v)
"##;

#[test]
fn the_tagged_wheel_is_taken_by_pip_for_musl_and_glibc_alike() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let made = Command::new("python3").args(["-c", MAKE_WHEEL, d]).output().unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let original = format!("{d}/demo-0.1.0-py3-none-manylinux_2_17_x86_64.whl");
    let pip = |wheel: &str, platform: &str| {
        let target = format!("{d}/installed-{platform}");
        let mut c = Command::new("python3");
        c.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index"])
            .args(["--no-deps", "--only-binary=:all:", "--platform", platform, "--target"])
            .args([target.as_str(), wheel]);
        run_bounded(&mut c, PROGRAM).status.success()
    };
    // As maturin makes it, pip on Alpine refuses it.
    assert!(!pip(&original, "musllinux_1_2_x86_64"), "an untagged wheel was taken for musl");
    let tagger = python_source().join("../scripts/tag-wheel");
    let mut c = Command::new(tagger);
    c.args([original.as_str(), "musllinux_1_2_x86_64"]);
    let tagged = run_bounded(&mut c, PROGRAM);
    assert!(tagged.status.success(), "{}", tagged.stderr);
    let wheel = tagged.stdout.trim().to_owned();
    assert!(
        wheel.ends_with("demo-0.1.0-py3-none-manylinux_2_17_x86_64.musllinux_1_2_x86_64.whl"),
        "{wheel}"
    );
    assert!(!std::path::Path::new(&original).exists(), "the untagged wheel is replaced");
    for platform in ["musllinux_1_2_x86_64", "manylinux_2_17_x86_64"] {
        assert!(pip(&wheel, platform), "pip --platform {platform} refused {wheel}");
        let script = format!("{d}/installed-{platform}/bin/demo");
        assert!(std::path::Path::new(&script).exists(), "{platform}: no {script}");
    }
}
