//! Another local user (`nobody`, through `setpriv`) cannot run a command through any door: MCP
//! over HTTP on loopback, the WebSocket door, the Unix socket, or a state directory they
//! pre-created (the client refuses a daemon of another user before sending anything, and the
//! daemon, `run` and `doctor` refuse a state directory another user owns).
//!
//! Each attempt is a `touch` of a marker in a directory everyone may write: had any door let
//! `nobody` in, the marker would exist.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use stockade_testkit::child::Reaped;
use stockade_testkit::mcp::HttpServer;
use stockade_testkit::{
    DaemonProc, Home, PATIENCE, cannot_run, eventually, owner_token_file, stockade_bin, text,
};

const NOBODY: u32 = 65534;
const TOKEN: &str = "security-test-token-7d1e0c55";

/// `program args` as `nobody` (uid and gid 65534, no supplementary groups).
fn as_nobody(program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(program).args(args);
    c.stdin(Stdio::null()).env("NO_COLOR", "1").env_remove("STOCKADE_HOME");
    c
}

fn output(c: &mut Command) -> Output {
    c.output().expect("the command runs")
}

/// Insists this machine can switch to `nobody` (root and `setpriv`): a test of another user's
/// reach that cannot switch users proves nothing, so it fails saying why.
fn require_switch_user() {
    let root = rustix::process::geteuid().is_root();
    let setpriv =
        Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        root && setpriv,
        "this test cannot run here: switching to the nobody user needs root and setpriv (run the tests as root on a host with util-linux)"
    );
}

/// A directory `nobody` may write (for markers and its own state directory).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("stockade-sec-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// The HTTP status `nobody`'s curl gets for `POST url` with `headers`.
fn nobody_http_status(url: &str, headers: &[&str], body: &str) -> String {
    let curl = PathBuf::from("/usr/bin/curl");
    let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"];
    for h in headers {
        args.extend(["-H", h]);
    }
    if !body.is_empty() {
        args.extend(["-X", "POST", "--data", body]);
    }
    args.push(url);
    text(&output(&mut as_nobody(&curl, &args)).stdout)
}

#[test]
fn nobody_cannot_run_a_command_through_mcp_http_or_the_websocket_door() {
    require_switch_user();
    let marks = open_dir();
    let mark = marks.path().join("ran");
    let touch = format!("touch {}", mark.display());

    // MCP over HTTP on loopback, as the README shows it: no token given, so one is generated
    // into the state directory, which nobody can read.
    let home = Home::new();
    let server = HttpServer::start(&home, &[]);
    let token_file = home.path().join("mcp-token");
    let cat = output(&mut as_nobody(Path::new("/bin/cat"), &[token_file.to_str().unwrap()]));
    assert!(!cat.status.success(), "nobody read the MCP token");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":"{touch}"}}}}}}"#
    );
    let json = ["Content-Type: application/json", "Accept: application/json, text/event-stream"];
    for body in [init, call.as_str()] {
        assert_eq!(nobody_http_status(&server.url, &json, body), "401");
        let guess = ["Content-Type: application/json", "Authorization: Bearer 0000000000000000"];
        assert_eq!(nobody_http_status(&server.url, &guess, body), "401");
    }

    // The WebSocket door: the token file is the owner's alone.
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    let daemon =
        DaemonProc::start(&["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let addr = daemon.ws_addr();
    let cat = output(&mut as_nobody(Path::new("/bin/cat"), &[file.to_str().unwrap()]));
    assert!(!cat.status.success(), "nobody read the WebSocket token");
    let upgrade = [
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];
    let url = format!("http://{addr}/");
    assert_eq!(nobody_http_status(&url, &upgrade, ""), "401");
    let mut guessed = upgrade.to_vec();
    guessed.push("Authorization: Bearer 0000000000000000");
    assert_eq!(nobody_http_status(&url, &guessed, ""), "401");

    std::thread::sleep(Duration::from_millis(200));
    assert!(!mark.exists(), "a command ran for nobody");
}

#[test]
fn nobody_cannot_use_the_unix_socket() {
    require_switch_user();
    let marks = open_dir();
    let mark = marks.path().join("ran");
    let touch = format!("touch {}", mark.display());
    let daemon = DaemonProc::start(&[]);
    let home = daemon.home.to_str().unwrap();
    // Through the CLI, as nobody would try it.
    let out = output(&mut as_nobody(
        &stockade_bin(),
        &["--home", home, "--no-autostart", "run", "--bg", &touch],
    ));
    assert!(!out.status.success(), "{}", text(&out.stdout));
    // One sentence, its cause said once (not "…denied (os error 13): Permission denied …").
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("Permission denied").count(), 1, "{stderr}");
    // Straight at the socket, even with the state directory opened up: the socket is 0600.
    let connect = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect({:?}); s.sendall(b'{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{{\"command\":\"{touch}\"}}}}\\n'); print(s.recv(100))",
        daemon.socket.to_str().unwrap()
    );
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        cannot_run("/usr/bin/python3 is needed to connect to the socket as nobody");
        return;
    }
    for mode in [0o700, 0o711] {
        std::fs::set_permissions(&daemon.home, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = output(&mut as_nobody(python, &["-c", &connect]));
        assert!(!out.status.success(), "mode {mode:o}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains("PermissionError"), "{}", text(&out.stderr));
    }
    std::fs::set_permissions(&daemon.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!mark.exists(), "a command ran for nobody");
}

#[test]
fn a_home_nobody_pre_created_is_refused_and_their_daemon_gets_nothing() {
    require_switch_user();
    let marks = open_dir();
    let mark = marks.path().join("ran");
    let home = marks.path().join("home");
    // nobody creates the predictable home and serves their own daemon on it.
    let mkdir = output(&mut as_nobody(Path::new("/bin/mkdir"), &[home.to_str().unwrap()]));
    assert!(mkdir.status.success(), "{}", text(&mkdir.stderr));
    let mut theirs =
        as_nobody(&stockade_bin(), &["--home", home.to_str().unwrap(), "daemon", "run"]);
    theirs.stdout(Stdio::null()).stderr(Stdio::null()).env("STOCKADE_LOG", "error");
    let _theirs = Reaped(theirs.spawn().unwrap());
    let socket = home.join("stockade.sock");
    eventually(PATIENCE, "nobody's daemon listens", || socket.exists().then_some(()));

    // Our client refuses it before sending anything: no secret leaves, no forged answer.
    let ours = |args: &[&str]| {
        let mut c = Command::new(stockade_bin());
        c.arg("--home").arg(&home).args(args).env("NO_COLOR", "1").stdin(Stdio::null());
        output(&mut c)
    };
    let touch = format!("touch {}", mark.display());
    let out = ours(&["run", "--bg", "--env", "SECRET_TOKEN=hunter2-secret", &touch]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("uid {NOBODY}")), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    let spool = home.join("spool");
    // Session directories only (`sh-*`): a daemon keeps directories made ahead of time too.
    let sessions = std::fs::read_dir(&spool)
        .map(|d| {
            d.flatten()
                .flat_map(|i| std::fs::read_dir(i.path()).into_iter().flatten().flatten())
                .filter(|e| e.file_name().to_string_lossy().starts_with("sh-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(sessions, 0, "nobody's daemon received a run");
    assert!(!mark.exists());
    drop(_theirs);

    // With nobody's daemon gone, our own daemon will not start on that home, and doctor says why.
    let out = ours(&["daemon", "start"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("belongs to uid {NOBODY}")), "{stderr}");
    // Nor run in the foreground: the daemon itself refuses the state directory.
    let out = ours(&["daemon", "run"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("belongs to uid {NOBODY}")), "{stderr}");
    let out = ours(&["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("NOT usable"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(&format!("uid {NOBODY}")), "{}", text(&out.stdout));
    // Nothing of ours runs there.
    assert_eq!(stockade_client::daemon_pid(&home).filter(|p| stockade_client::pid_alive(*p)), None);
}
