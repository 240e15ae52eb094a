//! A command's session is what the kernel says it is, never what its environment says: without a
//! cgroup (an unprivileged user, the usual pod; here `nobody`, and root with `--no-cgroup`), a
//! daemon ties a caller on its socket to the session whose keeper it descends from. A
//! `read-only` session that sets `STOCKADE_SESSION` to a looser session's marker and then asks
//! the CLI (`logs`, `grep`, `kill`, `run --bg`) or raw JSON-RPC to read, grep or kill that session, or to run under its policy (writes
//! in its workspace, the network), gets nothing: it is still itself. Its own calls still work.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use stockade_testkit::child::Reaped;
use stockade_testkit::{eventually, stockade_bin, text};

use crate::sandbox_common::{NOBODY, Sbx, User, exists, python, users};

/// The session's marker (`STOCKADE_SESSION=<instance>:<id>`) as its process carries it.
fn marker_of(pid: u64) -> String {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    environ
        .split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("STOCKADE_SESSION=").map(str::to_owned))
        .unwrap_or_else(|| panic!("process {pid} carries no session marker"))
}

/// A session as `ps` lists it.
fn listed(s: &Sbx, id: &str) -> Value {
    let ps = s.output(&["ps", "-a", "--json"]);
    assert!(ps.status.success(), "{}", text(&ps.stderr));
    let list: Value = serde_json::from_slice(&ps.stdout).unwrap();
    let found = list["sessions"].as_array().and_then(|all| all.iter().find(|x| x["id"] == id));
    found.cloned().unwrap_or_else(|| panic!("ps does not list {id}: {list}"))
}

#[test]
fn a_forged_session_marker_without_a_cgroup_gets_nothing() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        // The daemon as a user starts it where there is no cgroup to be had.
        let _daemon = Reaped(
            s.cli(&["daemon", "run", "--no-cgroup"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let sock = s.home.path().join("stockade.sock");
        eventually(Duration::from_secs(20), "the daemon's socket", || sock.exists().then_some(()));

        // The victim: a looser session (writes in its own workspace, the network allowed) with
        // something in its output that no command line spells out.
        let vws = s.outside.join("victim-ws");
        std::fs::create_dir(&vws).unwrap();
        if user == User::Nobody {
            std::os::unix::fs::chown(&vws, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let vw = vws.display().to_string();
        let loose = ["--sandbox", "workspace-write", "--network", "allow", "--cwd", &vw];
        let victim = s.run_started(&loose, r#"echo "VICTIM-$((6*7))-SECRET"; exec sleep 120"#);
        let (vid, vpid) = (victim["id"].as_str().unwrap(), victim["pid"].as_u64().unwrap());
        assert_eq!(listed(&s, vid)["containment"], "process-group", "no cgroup as {user:?}");
        let forged = marker_of(vpid);
        assert!(forged.ends_with(&format!(":{vid}")), "{forged}");

        let (bin, h) = (stockade_bin(), s.home.path_str());
        let bin = bin.display();
        let rpc = format!(
            r#"import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("{h}/stockade.sock")
req = {{"jsonrpc": "2.0", "id": 1, "method": sys.argv[1], "params": json.loads(sys.argv[2])}}
s.sendall((json.dumps(req) + "\n").encode())
answer = s.makefile().readline(); print(answer)
sys.exit("result" not in json.loads(answer))"#
        );
        std::fs::write(s.work.join("rpc.py"), rpc).unwrap();
        // Each attempt once judged (`t`), once with its output in the session's, to show that
        // nothing of the victim's came through.
        let script = format!(
            r#"
            own=${{STOCKADE_SESSION#*:}}
            export STOCKADE_SESSION='{forged}'
            t logs_other {bin} --home {h} logs {vid}
            t grep_other {bin} --home {h} grep {vid} SECRET
            t kill_other {bin} --home {h} kill {vid}
            t raw_read_other {py} rpc.py read '{{"id": "{vid}"}}'
            t raw_kill_other {py} rpc.py kill '{{"id": "{vid}"}}'
            t run_looser {bin} --home {h} run --bg --yield-ms 20000 --sandbox workspace-write --network allow --cwd {vw} 'touch {vw}/looser'
            {bin} --home {h} logs {vid}; {bin} --home {h} grep {vid} SECRET; {py} rpc.py read '{{"id": "{vid}"}}'
            {bin} --home {h} run --bg --yield-ms 20000 --cwd {vw} 'touch {vw}/inherited; echo nested-ran-confined'
            t own_logs {bin} --home {h} logs $own
            t own_nested {bin} --home {h} run --bg --yield-ms 20000 'echo own-nested-ok'
            {bin} --home {h} run --bg --yield-ms 20000 'echo own-nested-ok'
            "#
        );
        let (v, answer) = s.verdicts(&["--sandbox", "read-only", "--network", "none"], &script);
        v.expect(
            "denied",
            &[
                "logs_other",
                "grep_other",
                "kill_other",
                "raw_read_other",
                "raw_kill_other",
                "run_looser",
            ],
            user,
        );
        v.expect("allowed", &["own_logs", "own_nested"], user);
        let out = answer["output"].as_str().unwrap_or_default();
        assert!(!out.contains("VICTIM-42-SECRET"), "the victim's output leaked as {user:?}: {out}");
        assert!(out.contains("own-nested-ok"), "its own nested run works as {user:?}: {out}");
        // The nested run took the caller's own policy (read-only), not the victim's.
        assert!(out.contains("nested-ran-confined"), "{out}");
        for f in ["looser", "inherited"] {
            assert!(!exists(&vws.join(f)), "{f} written under the victim's policy as {user:?}");
        }
        // The victim runs on, its output intact, and ends by `kill` from outside.
        assert_eq!(listed(&s, vid)["state"], "running", "the victim as {user:?}");
        let read = s.output(&["read", vid]);
        assert!(text(&read.stdout).contains("VICTIM-42-SECRET"), "{}", text(&read.stderr));
        let killed = s.output(&["kill", vid]);
        assert!(killed.status.success(), "{}", text(&killed.stderr));
    }
}
