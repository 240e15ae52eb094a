//! No way around the sandbox through Stockade itself or against the rest of the machine, as
//! root and as `nobody`: a sandboxed command cannot write its own spool or record, list the home,
//! read the WebSocket door's token, loosen its sandbox through the CLI or raw JSON-RPC (a nested
//! run inherits the sandbox), signal or trace the daemon or another session, gain privileges
//! through a setuid binary, make a user namespace or use io_uring — and the daemon keeps serving.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;
use std::time::Duration;

use stockade_testkit::child::Reaped;
use stockade_testkit::{eventually, stockade_bin, text};

use crate::sandbox_common::{NOBODY, Sbx, User, exists, python, users};

const WW: &[&str] = &["--sandbox", "workspace-write", "--network", "none"];

#[test]
fn through_stockade_a_sandboxed_command_gets_no_further() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        // The door's token, outside the home (the home is hidden whole): the daemon hides it too.
        let token = s.outside.join("ws-token");
        std::fs::write(&token, "sandbox-test-token-0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        if user == User::Nobody {
            std::os::unix::fs::chown(&token, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let tok = token.to_str().unwrap();
        // The daemon with its WebSocket door, started by the test's user; stopped on drop.
        let _daemon = Reaped(
            s.cli(&["daemon", "run", "--ws", "127.0.0.1:0", "--token-file", tok])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let sock = s.home.path().join("stockade.sock");
        eventually(Duration::from_secs(20), "the daemon's socket", || sock.exists().then_some(()));
        let (h, o, bin) = (s.home.path_str(), s.outside.display(), stockade_bin());
        let bin = bin.display();
        let raw = format!(
            r#"import socket, json
s = socket.socket(socket.AF_UNIX); s.connect("{h}/stockade.sock")
req = {{"jsonrpc": "2.0", "id": 1, "method": "run", "params": {{"command": "touch {o}/raw-off", "sandbox": {{"mode": "off"}}}}}}
s.sendall((json.dumps(req) + "\n").encode()); print("RAW:", s.recv(65536).decode().strip())"#
        );
        std::fs::write(s.work.join("raw.py"), raw).unwrap();
        let script = format!(
            r#"
            inst=${{STOCKADE_SESSION%%:*}}; id=${{STOCKADE_SESSION#*:}}; d={h}/spool/$inst/$id
            t spool_append sh -c "echo INJECTED >> $d/output.log"
            t record_write sh -c "echo {{}} > $d/session.json"
            t spool_new touch $d/new
            t home_list ls {h}
            t token_read cat {tok}
            {bin} --home {h} run --bg --yield-ms 20000 'touch {o}/nested-bg; echo nested-ran'
            t nested_off {bin} --home {h} run --bg --yield-ms 20000 --sandbox off 'touch {o}/nested-off'
            {py} raw.py
            "#
        );
        let (v, answer) = s.verdicts(WW, &script);
        v.expect(
            "denied",
            &["spool_append", "record_write", "spool_new", "home_list", "token_read", "nested_off"],
            user,
        );
        let out = answer["output"].as_str().unwrap();
        assert!(out.contains("nested-ran"), "the nested run ran, confined: {out}");
        assert!(out.contains("RAW:") && out.contains("looser"), "raw JSON-RPC refused: {out}");
        for f in ["nested-bg", "nested-off", "raw-off"] {
            assert!(!exists(&s.outside.join(f)), "{f} escaped the sandbox as {user:?}: {out}");
        }
        let spool = answer["spool_path"].as_str().unwrap();
        assert!(!std::fs::read_to_string(spool).unwrap().contains("INJECTED\n"));
    }
}

#[test]
fn against_the_daemon_and_other_sessions_everything_is_denied() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        // Another, unsandboxed session of the same user.
        let other = s.output(&["run", "--bg", "--json", "sleep 60"]);
        let other: serde_json::Value = serde_json::from_slice(&other.stdout).unwrap();
        let (other_id, other_pid) = (other["id"].as_str().unwrap(), other["pid"].as_u64().unwrap());
        let daemon = s.daemon_pid();
        // A setuid-root copy of `id`: as nobody it would report uid 0 outside the sandbox.
        let suid = s.outside.join("suid-id");
        std::fs::copy("/usr/bin/id", &suid).unwrap();
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let io_uring = "import ctypes,sys; l=ctypes.CDLL(None); sys.exit(l.syscall(425, 8, ctypes.create_string_buffer(120)) < 0)";
        let ptrace = format!(
            "import ctypes,sys; l=ctypes.CDLL(None); sys.exit(l.ptrace(16, {other_pid}, 0, 0) != 0)"
        );
        let (bin, h) = (stockade_bin(), s.home.path_str());
        // A raw JSON-RPC call on the daemon's socket: exits 0 when answered with a result.
        let rpc = format!(
            r#"import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("{h}/stockade.sock")
req = {{"jsonrpc": "2.0", "id": 1, "method": sys.argv[1], "params": json.loads(sys.argv[2])}}
s.sendall((json.dumps(req) + "\n").encode())
sys.exit("result" not in json.loads(s.makefile().readline()))"#
        );
        std::fs::write(s.work.join("rpc.py"), rpc).unwrap();
        let script = format!(
            r#"
            t kill_daemon kill -9 {daemon}
            t kill_other kill -9 {other_pid}
            t stop_other kill -STOP {other_pid}
            t strace strace -o /dev/null -p {other_pid}
            t ptrace {py} -c "{ptrace}"
            t unshare unshare -r true
            t io_uring {py} -c "{io_uring}"
            t setuid sh -c '[ "$({suid} -u)" = 0 ]'
            t kill_via_stockade {bin} --home {h} kill {other_id}
            t read_other {py} rpc.py read '{{"id": "{other_id}"}}'
            t list_all {py} rpc.py list '{{}}'
            t read_own sh -c "{py} rpc.py read '{{\"id\": \"${{STOCKADE_SESSION#*:}}\"}}'"
            "#,
            suid = suid.display(),
            bin = bin.display(),
        );
        let (v, _) = s.verdicts(WW, &script);
        let mut denied =
            vec!["kill_daemon", "kill_other", "stop_other", "strace", "ptrace", "unshare"];
        denied.extend(["io_uring", "kill_via_stockade", "read_other", "list_all"]);
        if user == User::Nobody {
            // Meaningful only where the bit would raise the uid: check it does without sandbox.
            let plain = s.cli(&[]).get_program().to_owned();
            assert_eq!(plain, "setpriv");
            let control = std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(&suid)
                .arg("-u")
                .output()
                .unwrap();
            assert_eq!(text(&control.stdout).trim(), "0", "the setuid copy works unsandboxed");
            denied.push("setuid");
        }
        v.expect("denied", &denied, user);
        v.expect("allowed", &["read_own"], user);
        // The daemon serves on, the other session runs on, and ends by `kill` from outside.
        assert_eq!(s.daemon_pid(), daemon);
        let ps = s.output(&["ps", "--json"]);
        assert!(ps.status.success(), "{}", text(&ps.stderr));
        let listed: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
        let state = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == other_id)
            .map(|x| x["state"].clone());
        assert_eq!(state, Some("running".into()), "{listed}");
        let killed = s.output(&["kill", other_id]);
        assert!(killed.status.success(), "{}", text(&killed.stderr));
    }
}
