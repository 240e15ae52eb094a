//! What a sandboxed command can do to the machine it shares with the daemon and its neighbours
//! (the same PID, IPC and UTS namespaces, the same uid), tried with the attacker's usual tools
//! through the real binary and a daemon the CLI auto-starts, as root and as `nobody`, from
//! `read-only` and `workspace-write` sessions; each vector is its own case with its own verdict:
//!
//! - `prlimit`, `renice`, `chrt` (SCHED_IDLE), `taskset -p`, `ionice -p`, `process_madvise`,
//!   `sched_setparam` and `sched_setattr` on the daemon and on neighbours of the same uid
//!   (another session's process, a process Stockade never started) are refused, nothing of
//!   theirs changes, and the daemon serves its owner afterwards; the same tools work on the
//!   neighbours without a sandbox;
//! - `fanotify_init`, `clock_settime`, `sethostname`, `syslog` (a `klogctl` read) and `vhangup`
//!   are refused with `EPERM` (what each does without a sandbox is checked beside it);
//! - another process's System V shared memory and message queue cannot be attached, read,
//!   written, looked up by key or removed, and the session cannot make one of its own;
//! - the command still renices, limits, pins and ionices itself (`nice -n 5`, `renice -p 0`,
//!   `ionice -c3 CMD`, `taskset -c 0 CMD`, `ulimit`), while `renice -p $$` names a pid: refused.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use serde_json::Value;
use stockade_testkit::child::Reaped;
use stockade_testkit::text;

use crate::sandbox_common::{NOBODY, Sbx, User, python, users};

const POLICIES: [&[&str]; 2] = [
    &["--sandbox", "read-only", "--network", "none"],
    &["--sandbox", "workspace-write", "--network", "none"],
];
const OFF: &[&str] = &["--sandbox", "off"];

/// What can be seen of a process's limits, priority, scheduling, affinity and I/O priority.
fn knobs(pid: u64) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Fields 19 (nice) and 41 (policy), counted from 3 after `comm`.
    let (nice, policy) = (fields[19 - 3], fields[41 - 3]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let cpus = status.lines().find(|l| l.starts_with("Cpus_allowed_list")).unwrap_or_default();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let io = Command::new("ionice").args(["-p", &pid.to_string()]).output().unwrap();
    format!("nice {nice} policy {policy} {cpus}\nio {}\n{limits}", text(&io.stdout).trim())
}

/// `python3 -c` of `code` with `libc` (errno kept), `pid` and `pidfd_open` at hand.
fn py_call(py: &str, code: &str) -> String {
    format!(
        r#"{py} -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r = {code}
sys.exit(0 if r >= 0 else 1)'"#
    )
}

/// The attempts on process `pid` (named `who` in the verdicts).
fn on_process(py: &str, who: &str, pid: u64) -> String {
    // process_madvise(pidfd_open(pid), no range, MADV_COLD): on another process it needs
    // CAP_SYS_NICE (root) besides the filter's leave.
    let madvise =
        py_call(py, &format!("libc.syscall(440, libc.syscall(434, {pid}, 0), None, 0, 20, 0)"));
    // sched_setparam(pid, {0}) keeps its policy; sched_setattr(pid, {size 48, SCHED_IDLE}, 0).
    let sched_param =
        py_call(py, &format!("libc.sched_setparam({pid}, ctypes.byref(ctypes.c_int(0)))"));
    let sched_attr = py_call(
        py,
        &format!("libc.syscall(314, {pid}, ctypes.byref((ctypes.c_uint32 * 12)(48, 5)), 0)"),
    );
    format!(
        r#"
        t prlimit_nofile_{who} prlimit --pid {pid} --nofile=20:20
        t prlimit_cpu_{who} prlimit --pid {pid} --cpu=1:1
        t setpriority_{who} renice -n 19 -p {pid}
        t sched_idle_{who} chrt -i -p 0 {pid}
        t affinity_{who} taskset -p 1 {pid}
        t ioprio_{who} ionice -c 3 -p {pid}
        t madvise_{who} {madvise}
        t sched_param_{who} {sched_param}
        t sched_attr_{who} {sched_attr}
        "#
    )
}

const VECTORS: [&str; 9] = [
    "prlimit_nofile",
    "prlimit_cpu",
    "setpriority",
    "sched_idle",
    "affinity",
    "ioprio",
    "madvise",
    "sched_param",
    "sched_attr",
];

fn named(who: &str) -> Vec<String> {
    VECTORS.iter().map(|v| format!("{v}_{who}")).collect()
}

/// A `sleep` of `user`'s started by the test, outside Stockade altogether; killed on drop.
fn stranger(user: User) -> Reaped {
    let mut c = match user {
        User::Root => Command::new("sleep"),
        User::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "sleep"]);
            c
        }
    };
    Reaped(c.arg("120").stdout(Stdio::null()).spawn().unwrap())
}

fn refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

#[test]
fn limits_priorities_and_affinity_of_the_daemon_and_a_neighbour_are_refused() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        for policy in POLICIES {
            // Neighbours of the same user outside this sandbox: another session's process, and
            // a process Stockade never started.
            let other = s.output(&["run", "--bg", "--json", "sleep 120"]);
            let other: Value = serde_json::from_slice(&other.stdout).unwrap();
            let (other_id, neighbour) =
                (other["id"].as_str().unwrap(), other["pid"].as_u64().unwrap());
            let stranger = stranger(user);
            let daemon = u64::from(s.daemon_pid());
            let targets = [
                ("daemon", daemon),
                ("neighbour", neighbour),
                ("stranger", stranger.0.id().into()),
            ];
            let before = targets.map(|(_, pid)| knobs(pid));
            let script: String =
                targets.iter().map(|&(who, pid)| on_process(py, who, pid)).collect();
            let (v, _) = s.verdicts(policy, &script);
            for (i, (who, pid)) in targets.into_iter().enumerate() {
                v.expect("denied", &refs(&named(who)), user);
                assert_eq!(knobs(pid), before[i], "the {who}'s knobs under {policy:?} as {user:?}");
            }
            // The daemon serves its owner on.
            assert_eq!(u64::from(s.daemon_pid()), daemon);
            let served = s.output(&["run", "echo still-serving"]);
            assert!(text(&served.stdout).contains("still-serving"), "{}", text(&served.stderr));
            // Without a sandbox the same tools reach both neighbours: each vector is real.
            for (who, pid) in &targets[1..] {
                let (v, _) = s.verdicts(OFF, &on_process(py, who, *pid));
                let mut names = named(who);
                if user == User::Nobody {
                    // Another process's memory advice needs CAP_SYS_NICE: `nobody` never has it.
                    names.retain(|n| !n.starts_with("madvise"));
                }
                v.expect("allowed", &refs(&names), user);
            }
            assert_ne!(knobs(neighbour), before[1]);
            let killed = s.output(&["kill", other_id]);
            assert!(killed.status.success(), "{}", text(&killed.stderr));
        }
    }
}

/// The machine-wide calls, each printing `NAME=<errno>` (0: it worked). `clock_settime` is
/// made on `CLOCK_MONOTONIC`, which the kernel refuses with `EINVAL` before any permission check
/// (the real clock is never touched): `EPERM` can only be the filter's. `sethostname` sets the
/// name it has.
const MACHINE: &str = r#"import ctypes, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def report(name, r):
    print("%s=%d" % (name, 0 if r >= 0 else ctypes.get_errno()))
r = libc.fanotify_init(0x4, 0)
if r < 0 and ctypes.get_errno() == 1: r = libc.fanotify_init(0x200, 0)
report("fanotify_init", r)
report("clock_settime", libc.clock_settime(1, ctypes.byref((ctypes.c_long * 2)(0, 0))))
name = socket.gethostname().encode()
report("sethostname", libc.sethostname(name, len(name)))
report("syslog", libc.klogctl(3, ctypes.create_string_buffer(4096), 4096))
report("vhangup", libc.vhangup())
"#;

/// The `NAME=<errno>` lines of a run's output.
fn errnos(answer: &Value) -> BTreeMap<String, i32> {
    let out = answer["output"].as_str().unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

#[test]
fn fanotify_the_clock_the_hostname_the_kernel_log_and_vhangup_are_refused() {
    let Some(py) = python() else { return };
    let calls = ["fanotify_init", "clock_settime", "sethostname", "syslog", "vhangup"];
    for user in users() {
        let s = Sbx::new(user);
        std::fs::write(s.work.join("machine.py"), MACHINE).unwrap();
        let script = format!("{py} {}/machine.py", s.work.display());
        // Without a sandbox (a session has no controlling terminal: vhangup hangs up nothing).
        let free = errnos(&s.run(OFF, &script));
        // What the kernel lets this user do without a sandbox, so an EPERM inside is the
        // filter's: root may do them all; `nobody` an unprivileged fanotify, and the clock
        // call shows EINVAL, not EPERM (the others are the kernel's EPERM for `nobody` anyway).
        let real: &[&str] = match user {
            User::Root => &calls,
            User::Nobody => &["fanotify_init", "clock_settime"],
        };
        for call in real {
            assert_ne!(free.get(*call), Some(&libc::EPERM), "{call} without a sandbox: {free:?}");
            assert!(free.contains_key(*call), "{call} without a sandbox: {free:?}");
        }
        for policy in POLICIES {
            let inside = errnos(&s.run(policy, &script));
            for call in calls {
                assert_eq!(
                    inside.get(call),
                    Some(&libc::EPERM),
                    "{call} under {policy:?} as {user:?}: {inside:?}"
                );
            }
        }
    }
}

/// System V objects made outside a session, removed when the test ends (root may remove any).
struct Ipc {
    shm: String,
    queue: String,
}

impl Drop for Ipc {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-m", &self.shm, "-q", &self.queue]).output();
    }
}

/// `CMD ARGS` as `user` (setpriv for `nobody`): its standard output.
fn as_user(user: User, cmd: &str, args: &[&str]) -> String {
    let mut c = match user {
        User::Root => Command::new(cmd),
        User::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", cmd]);
            c
        }
    };
    let out = c.args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The id `ipcmk` printed (`Shared memory id: N`, `Message queue id: N`).
fn id_of(printed: &str) -> String {
    printed.rsplit(':').next().unwrap_or_default().trim().to_owned()
}

/// `shm` reads or writes the segment, `msg` sends or receives on the queue, `key` looks the
/// segment up by its key, `private` makes a segment of its own; each prints `NAME=<errno>`.
const SYSV: &str = r#"import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
shm, queue, key = int(sys.argv[2]), int(sys.argv[3]), ctypes.c_int(int(sys.argv[4], 16)).value
def report(name, ok):
    print("%s=%d" % (name, 0 if ok else ctypes.get_errno()))
def attach(flags):
    a = libc.shmat(shm, None, flags)
    return None if a in (None, ctypes.c_void_p(-1).value) else a
msg = (ctypes.c_char * 64)()
for what in sys.argv[1].split(","):
    if what == "read":
        a = attach(0o10000)
        report("shm_read", a is not None)
        if a is not None: print("DATA=" + ctypes.string_at(a, 10).decode())
    elif what == "write":
        a = attach(0)
        report("shm_write", a is not None)
        if a is not None: ctypes.memmove(a, sys.argv[5].encode(), 10)
    elif what == "stat":
        report("shm_stat", libc.shmctl(shm, 2, ctypes.create_string_buffer(256)) >= 0)
    elif what == "key":
        report("shm_key", libc.shmget(key, 0, 0) >= 0)
    elif what == "private":
        made = libc.shmget(0, 4096, 0o1600)
        report("shm_private", made >= 0)
        if made >= 0: libc.shmctl(made, 0, None)  # IPC_RMID: a failing run leaks nothing
    elif what == "send":
        ctypes.memmove(msg, b"\x01\0\0\0\0\0\0\0" + sys.argv[5].encode(), 18)
        report("msg_send", libc.msgsnd(queue, msg, 10, 0o4000) >= 0)
    elif what == "receive":
        n = libc.msgrcv(queue, msg, 56, 0, 0o4000)
        report("msg_receive", n >= 0)
        if n >= 0: print("MSG=" + msg.raw[8:8 + n].decode())
"#;

#[test]
fn another_process_s_sysv_shared_memory_and_queue_are_out_of_reach() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        std::fs::write(s.work.join("sysv.py"), SYSV).unwrap();
        // The owner's objects, made by the user's own process outside any session.
        let ipc = Ipc {
            shm: id_of(&as_user(user, "ipcmk", &["-M", "4096", "-p", "0600"])),
            queue: id_of(&as_user(user, "ipcmk", &["-Q", "-p", "0600"])),
        };
        let table = as_user(user, "ipcs", &["-m"]);
        let key = table
            .lines()
            .find_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols.get(1) == Some(&ipc.shm.as_str())).then(|| cols[0].to_owned())
            })
            .unwrap_or_else(|| panic!("segment {} not listed: {table}", ipc.shm));
        let sysv = |what: &str, data: &str| {
            let script = s.work.join("sysv.py");
            vec![script.display().to_string(), what.into(), ipc.shm.clone(), ipc.queue.clone()]
                .into_iter()
                .chain([key.clone(), data.into()])
                .collect::<Vec<_>>()
        };
        let outside = |what: &str, data: &str| {
            let args = sysv(what, data);
            as_user(user, py, &args.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert!(outside("write,send", "OWNER-DATA").contains("shm_write=0"));
        let all = "read,write,stat,key,private,send,receive";
        let names = ["shm_read", "shm_write", "shm_stat", "shm_key", "shm_private"];
        for policy in POLICIES {
            let script = format!(
                "{py} {} ; ipcrm -m {} -q {}",
                sysv(all, "INJECTED!!").join(" "),
                ipc.shm,
                ipc.queue
            );
            let inside = errnos(&s.run(policy, &script));
            for name in names.iter().chain(&["msg_send", "msg_receive"]) {
                assert_eq!(
                    inside.get(*name),
                    Some(&libc::EPERM),
                    "{name} under {policy:?} as {user:?}: {inside:?}"
                );
            }
        }
        // Untouched: the owner reads its data and its one message back (and the objects are
        // still there: `ipcrm` inside was refused).
        let back = outside("read,receive", "");
        assert!(back.contains("DATA=OWNER-DATA"), "{back}");
        assert!(back.contains("MSG=OWNER-DATA"), "{back}");
        // Without a sandbox another process of the user reaches both: the vector is real.
        let free = s.run(OFF, &format!("{py} {}", sysv("read,stat,key", "").join(" ")));
        let free = errnos(&free);
        for name in ["shm_read", "shm_stat", "shm_key"] {
            assert_eq!(free.get(name), Some(&0), "{name} without a sandbox: {free:?}");
        }
        if user == User::Nobody {
            // The objects were nobody's: made with its uid, as its sessions run.
            assert!(table.contains("nobody") || table.contains(&NOBODY.to_string()), "{table}");
        }
    }
}

#[test]
fn a_command_still_renices_limits_pins_and_ionices_itself() {
    let Some(py) = python() else { return };
    let script = format!(
        r#"
        base=$(nice)
        t nice sh -c "[ \$(nice -n 5 nice) -eq $((base + 5)) ]"
        t renice_zero sh -c 'renice -n 7 -p 0'
        t setpriority_self {py} -c 'import os; os.setpriority(os.PRIO_PROCESS, 0, 9); assert os.getpriority(os.PRIO_PROCESS, 0) == 9'
        t ulimit sh -c 'ulimit -n 64 && [ "$(ulimit -n)" = 64 ]'
        t prlimit_cmd prlimit --nofile=64:64 true
        t ionice_cmd ionice -c 3 true
        t taskset_cmd taskset -c 0 true
        t chrt_cmd chrt -i 0 true
        t renice_own_pid sh -c 'renice -n 5 -p $$'
        "#
    );
    let ok = ["nice", "renice_zero", "setpriority_self", "ulimit", "prlimit_cmd", "ionice_cmd"];
    for user in users() {
        let s = Sbx::new(user);
        for policy in POLICIES {
            let (v, _) = s.verdicts(policy, &script);
            v.expect("allowed", &ok, user);
            v.expect("allowed", &["taskset_cmd", "chrt_cmd"], user);
            // A pid, even its own, is another process to the filter: only 0 names the caller.
            v.expect("denied", &["renice_own_pid"], user);
        }
        // Without a sandbox it renices its own pid: the refusal above is the filter's.
        let (v, _) = s.verdicts(OFF, &script);
        v.expect("allowed", &["renice_own_pid"], user);
    }
}

/// `doctor` names what the filter holds of all this, and what it cannot hold without namespaces.
#[test]
fn doctor_names_what_the_filter_holds_and_what_it_cannot() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(stockade_testkit::stockade_bin())
        .args(["--home", &home.path().join("home").display().to_string(), "doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines: Vec<&str> =
        v["sandbox"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let own =
        lines.iter().filter(|l| l.contains("own world")).copied().collect::<Vec<_>>().join("\n");
    for call in [
        "prlimit64",
        "setpriority",
        "sched_setscheduler",
        "sched_setaffinity",
        "ioprio_set",
        "process_madvise",
        "fanotify_init",
        "clock_settime",
        "adjtimex",
        "sethostname",
        "setdomainname",
        "syslog",
        "vhangup",
        "System V IPC",
    ] {
        assert!(own.contains(call), "doctor does not name {call}: {lines:?}");
    }
    let not_held = lines.iter().find(|l| l.starts_with("not held without namespaces")).unwrap();
    for what in ["chmod", "/dev/pts", "environ", "/dev/kmsg"] {
        assert!(not_held.contains(what), "{not_held}");
    }
}
