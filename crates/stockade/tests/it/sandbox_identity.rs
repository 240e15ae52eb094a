//! A command's session is what the kernel says it is, never what its environment says: without a
//! cgroup (an unprivileged user, the usual pod; here `nobody`, and root with `--no-cgroup`), a
//! daemon ties a caller on its socket to the session whose keeper it descends from; with one
//! (root here), to the session whose cgroup it is in. A `read-only` session that sets
//! `STOCKADE_SESSION` to a looser session's marker and then asks the CLI (`logs`, `grep`, `kill`,
//! `run --bg`) or raw JSON-RPC to read, grep or kill that session, or to run under its policy
//! (writes in its workspace, the network), gets nothing: it is still itself, and its own calls
//! still work. Without a keeper, an orphan that left its session's tree is nobody's and gets
//! nothing either.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use stockade_testkit::child::Reaped;
use stockade_testkit::{eventually, stockade_bin, text};

use crate::sandbox_common::{NOBODY, Sbx, TRY, User, Verdicts, exists, python, users};

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

/// A daemon started with `flags` by `user` (no cgroup), a looser victim session and its marker.
struct Scene {
    // Stopped first, before its home goes.
    _daemon: Reaped,
    s: Sbx,
    /// The victim's workspace, where it may write and the attacker may not.
    vws: std::path::PathBuf,
    vid: String,
    /// The victim's marker value, `<instance>:<id>`.
    forged: String,
}

/// The scene under a daemon started with `flags`; `containment` is what its sessions get.
fn scene(user: User, flags: &[&str], containment: &str) -> Scene {
    let s = Sbx::new(user);
    let mut args = vec!["daemon", "run"];
    args.extend(flags);
    let daemon = Reaped(s.cli(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
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
    assert_eq!(listed(&s, vid)["containment"], containment, "as {user:?}");
    let forged = marker_of(vpid);
    assert!(forged.ends_with(&format!(":{vid}")), "{forged}");
    let h = s.home.path_str();
    let rpc = format!(
        r#"import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("{h}/stockade.sock")
req = {{"jsonrpc": "2.0", "id": 1, "method": sys.argv[1], "params": json.loads(sys.argv[2])}}
s.sendall((json.dumps(req) + "\n").encode())
answer = s.makefile().readline(); print(answer)
sys.exit("result" not in json.loads(answer))"#
    );
    std::fs::write(s.work.join("rpc.py"), rpc).unwrap();
    Scene { _daemon: daemon, s, vws, vid: vid.to_owned(), forged }
}

impl Scene {
    /// The victim runs on, its output intact, and ends by `kill` from outside.
    fn victim_untouched(&self, user: User) {
        let (s, vid) = (&self.s, self.vid.as_str());
        for f in ["looser", "inherited"] {
            assert!(
                !exists(&self.vws.join(f)),
                "{f} written under the victim's policy as {user:?}"
            );
        }
        assert_eq!(listed(s, vid)["state"], "running", "the victim as {user:?}");
        let read = s.output(&["read", vid]);
        assert!(text(&read.stdout).contains("VICTIM-42-SECRET"), "{}", text(&read.stderr));
        let killed = s.output(&["kill", vid]);
        assert!(killed.status.success(), "{}", text(&killed.stderr));
    }
}

/// The attempts on the victim with its marker forged, each judged (`t`) and, for the reads, once
/// with its output in the session's, to show that nothing of the victim's comes through.
fn attempts(sc: &Scene, py: &str) -> String {
    let (bin, h) = (stockade_bin(), sc.s.home.path_str());
    let (bin, vid, vw, forged) = (bin.display(), &sc.vid, sc.vws.display(), &sc.forged);
    format!(
        r#"
        export STOCKADE_SESSION='{forged}'
        t logs_other {bin} --home {h} logs {vid}
        t grep_other {bin} --home {h} grep {vid} SECRET
        t kill_other {bin} --home {h} kill {vid}
        t raw_read_other {py} rpc.py read '{{"id": "{vid}"}}'
        t raw_kill_other {py} rpc.py kill '{{"id": "{vid}"}}'
        t run_looser {bin} --home {h} run --bg --yield-ms 20000 --sandbox workspace-write --network allow --cwd {vw} 'touch {vw}/looser'
        {bin} --home {h} logs {vid}; {bin} --home {h} grep {vid} SECRET; {py} rpc.py read '{{"id": "{vid}"}}'
        {bin} --home {h} run --bg --yield-ms 20000 --cwd {vw} 'touch {vw}/inherited; echo nested-ran-confined'
        "#
    )
}

const REFUSED: [&str; 6] =
    ["logs_other", "grep_other", "kill_other", "raw_read_other", "raw_kill_other", "run_looser"];

const READ_ONLY: &[&str] = &["--sandbox", "read-only", "--network", "none"];

/// From inside a read-only session with the victim's marker forged: nothing of the victim's,
/// while its own calls work.
fn forged_from_inside(sc: &Scene, py: &str, user: User) {
    let (bin, h) = (stockade_bin(), sc.s.home.path_str());
    let bin = bin.display();
    let script = format!(
        r#"
        own=${{STOCKADE_SESSION#*:}}
        {}
        t own_logs {bin} --home {h} logs $own
        t own_nested {bin} --home {h} run --bg --yield-ms 20000 'echo own-nested-ok'
        {bin} --home {h} run --bg --yield-ms 20000 'echo own-nested-ok'
        "#,
        attempts(sc, py)
    );
    let (v, answer) = sc.s.verdicts(READ_ONLY, &script);
    v.expect("denied", &REFUSED, user);
    v.expect("allowed", &["own_logs", "own_nested"], user);
    let out = answer["output"].as_str().unwrap_or_default();
    assert!(!out.contains("VICTIM-42-SECRET"), "the victim's output leaked as {user:?}: {out}");
    assert!(out.contains("own-nested-ok"), "its own nested run works as {user:?}: {out}");
    // The nested run took the caller's own policy (read-only), not the victim's.
    assert!(out.contains("nested-ran-confined"), "{out}");
    sc.victim_untouched(user);
}

#[test]
fn a_forged_session_marker_without_a_cgroup_gets_nothing() {
    let Some(py) = python() else { return };
    for user in users() {
        forged_from_inside(&scene(user, &["--no-cgroup"], "process-group"), py, user);
    }
}

/// Where the daemon has a cgroup per session (root here), the cgroup decides: the same.
#[test]
fn a_forged_session_marker_with_a_cgroup_gets_nothing_either() {
    let Some(py) = python() else { return };
    if users().is_empty() {
        return;
    }
    forged_from_inside(&scene(User::Root, &[], "cgroup"), py, User::Root);
}

/// Without a keeper, a process that left its session's tree (a double fork: it lands on the
/// daemon, a child subreaper) is a descendant of no session's root: with a forged marker it
/// gets nothing either, not the victim's rights.
#[test]
fn an_orphan_outside_every_session_tree_gets_nothing_with_a_forged_marker() {
    let Some(py) = python() else { return };
    for user in users() {
        let sc = scene(user, &["--no-cgroup", "--session-keeper=never"], "process-group");
        // The orphan runs while the session's root still lives; its output goes to the session's.
        let orphan = format!(
            "{TRY}\nsleep 0.3; echo orphan-ppid=$(ps -o ppid= -p $$)\n{}",
            attempts(&sc, py)
        );
        std::fs::write(sc.s.work.join("orphan.sh"), orphan).unwrap();
        let script = "(sh orphan.sh &); sleep 4";
        let answer = sc.s.run(READ_ONLY, script);
        let out = answer["output"].as_str().unwrap_or_default().to_owned();
        let v = Verdicts::of(&out);
        v.expect("denied", &REFUSED, user);
        // It was the daemon's child, outside every session's tree.
        let daemon = sc.s.daemon_pid();
        let ppid = out.lines().find_map(|l| l.strip_prefix("orphan-ppid=")).map(str::trim);
        assert_eq!(ppid, Some(daemon.to_string().as_str()), "{out}");
        assert!(!out.contains("VICTIM-42-SECRET"), "the victim's output leaked as {user:?}: {out}");
        assert!(
            out.contains("this caller runs under a sandbox no running session accounts for"),
            "{out}"
        );
        sc.victim_untouched(user);
    }
}
