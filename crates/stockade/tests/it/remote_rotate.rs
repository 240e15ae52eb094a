//! Tokens and certificates replaced while daemons run, the real binary: the files are laid out as
//! the kubelet mounts a Secret (`token -> ..data/token`, `..data -> ..<version>`) and updated as
//! it updates one (a new version directory, then a new `..data` symlink renamed over the old).
//! The daemon reads them again when they change (or on SIGHUP): new connections need the new
//! token and see the new certificate, the old token is refused, established connections and
//! running sessions are untouched, and a file that cannot be used keeps the old one in use.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stockade_client::{Client, ConnectOptions, RemoteOptions};
use stockade_proto::SessionState;
use stockade_proto::rpc::{KillParams, ListParams, RunParams, method};
use stockade_testkit::{DaemonProc, eventually};

use crate::remote_support::{Ca, PORT, Root, Sandbox, namespaces_usable, processes_in};

/// How long a changed file may take to be in use (the daemon looks every second).
const RELOAD_WITHIN: Duration = Duration::from_secs(10);

/// A directory laid out as the kubelet mounts a Secret volume: `NAME -> ..data/NAME`,
/// `..data -> ..<version>`.
struct SecretDir {
    dir: PathBuf,
    version: u32,
}

impl SecretDir {
    fn new(dir: PathBuf, files: &[(&str, &[u8])]) -> SecretDir {
        std::fs::create_dir_all(&dir).unwrap();
        let mut secret = SecretDir { dir, version: 0 };
        secret.update(files, 0o600);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), secret.dir.join(name)).unwrap();
        }
        secret
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The kubelet's update: the files in a new version directory (with `mode`), a new `..data`
    /// symlink renamed over the old one (atomic), the old directory removed.
    fn update(&mut self, files: &[(&str, &[u8])], mode: u32) {
        let old = format!("..2026_11_26_00_00_{:02}", self.version);
        self.version += 1;
        let new = format!("..2026_11_26_00_00_{:02}", self.version);
        std::fs::create_dir(self.dir.join(&new)).unwrap();
        for (name, content) in files {
            let path = self.dir.join(&new).join(name);
            std::fs::write(&path, content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::os::unix::fs::symlink(&new, self.dir.join("..data_tmp")).unwrap();
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).unwrap();
        let _ = std::fs::remove_dir_all(self.dir.join(old));
    }
}

/// The certificate and key `ca` issues for `ip`, as a Secret's files.
fn issued(ca: &Ca, ip: &str) -> Vec<(&'static str, Vec<u8>)> {
    let staging = tempfile::tempdir().unwrap();
    ca.issue(ip, staging.path());
    ["cert.pem", "key.pem"]
        .into_iter()
        .map(|name| (name, std::fs::read(staging.path().join(name)).unwrap()))
        .collect()
}

fn files<'a>(owned: &'a [(&'static str, Vec<u8>)]) -> Vec<(&'static str, &'a [u8])> {
    owned.iter().map(|(name, content)| (*name, content.as_slice())).collect()
}

/// A plain token file (for a token that is no longer the daemon's).
fn plain_token(dir: &Path, name: &str, token: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn options(home: &Path, url: &str, token: &Path, ca: &Path) -> ConnectOptions {
    let mut opts = ConnectOptions::new(home);
    opts.autostart = false;
    opts.start_timeout = Duration::from_secs(5);
    let mut remote = RemoteOptions::new(url, token);
    remote.ca_file = Some(ca.to_owned());
    opts.remote = Some(remote);
    opts
}

/// The door's `/metrics` with curl (the door serves HTTPS with the certificate `ca` signed).
fn metric(url: &str, token: &str, ca: &Path, name: &str) -> f64 {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{}/metrics", url.replacen("wss://", "https://", 1)))
        .output()
        .unwrap_or_else(|e| panic!("this test needs curl to read /metrics: {e}"));
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {body}"))
}

/// Why a connection was refused (it must be).
fn refusal(connected: Result<Client, stockade_client::ClientError>, with: &str) -> String {
    match connected {
        Ok(_) => panic!("a client with {with} was let in"),
        Err(e) => e.to_string(),
    }
}

fn running(client: &mut Client) -> BTreeSet<String> {
    let sessions = client.call::<method::List>(ListParams::default()).unwrap().sessions;
    sessions.into_iter().filter(|s| s.state == SessionState::Running).map(|s| s.id).collect()
}

#[test]
fn a_rotated_token_and_a_replaced_certificate_are_used_without_ending_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (Ca::new(), Ca::new());
    let first = "first-token-0123456789abcdef";
    let mut token = SecretDir::new(tmp.path().join("token"), &[("token", first.as_bytes())]);
    let mut tls = SecretDir::new(tmp.path().join("tls"), &files(&issued(&ca1, "127.0.0.1")));
    let daemon = DaemonProc::start(&[
        "--ws",
        "127.0.0.1:0",
        "--token-file",
        token.path("token").to_str().unwrap(),
        "--tls-cert",
        tls.path("cert.pem").to_str().unwrap(),
        "--tls-key",
        tls.path("key.pem").to_str().unwrap(),
    ]);
    let ready = daemon.stderr.lock().unwrap().clone();
    let addr = ready.split("wss://").nth(1).and_then(|r| r.split_whitespace().next());
    let url = format!("wss://{}", addr.unwrap_or_else(|| panic!("no wss:// address: {ready}")));
    let home = tmp.path().join("client");
    let old_token = plain_token(tmp.path(), "old-token", first);
    let connect = |token: &Path, ca: &Path| Client::connect(&options(&home, &url, token, ca));
    let mut held = connect(&token.path("token"), &ca1.pem()).unwrap();
    let id = held
        .call::<method::Run>(RunParams {
            command: "sleep 600".into(),
            background: true,
            ..RunParams::default()
        })
        .unwrap()
        .id;

    // The token rotated: the new one is taken, the old one refused, within the bound.
    let second = "second-token-0123456789abcdef";
    let swapped = Instant::now();
    token.update(&[("token", second.as_bytes())], 0o600);
    eventually(RELOAD_WITHIN, "the new token to be accepted", || {
        connect(&token.path("token"), &ca1.pem()).ok()
    });
    let took = swapped.elapsed();
    let refused = refusal(connect(&old_token, &ca1.pem()), "the old token");
    assert!(refused.contains("token was not accepted"), "{refused}");
    // The connection made with the old token still works, and the session still runs.
    assert!(running(&mut held).contains(&id), "the session outlives the rotation");

    // The certificate replaced by one of another CA: a client trusting the new CA connects.
    let swapped = Instant::now();
    tls.update(&files(&issued(&ca2, "127.0.0.1")), 0o600);
    let mut fresh = eventually(RELOAD_WITHIN, "the new certificate to be served", || {
        connect(&token.path("token"), &ca2.pem()).ok()
    });
    let took_cert = swapped.elapsed();
    let refused = refusal(connect(&token.path("token"), &ca1.pem()), "the old CA");
    assert!(refused.contains("TLS"), "{refused}");
    assert!(running(&mut fresh).contains(&id));
    assert!(running(&mut held).contains(&id), "the first connection is still open");

    // A certificate that is not PEM, and a token file others can read: both refused, the old
    // ones kept, the daemon alive; each failure logged once and counted.
    tls.update(&[("cert.pem", &b"not a certificate"[..]), ("key.pem", &b"not a key"[..])], 0o600);
    token.update(&[("token", &b"third-token-0123456789abcdef"[..])], 0o644);
    let logged = || daemon.stderr.lock().unwrap().matches("could not reload").count();
    eventually(RELOAD_WITHIN, "both failures logged", || (logged() == 2).then_some(()));
    assert_eq!(metric(&url, second, &ca2.pem(), "stockade_reload_failures_total"), 2.0);
    assert_eq!(metric(&url, second, &ca2.pem(), "stockade_reloads_total"), 2.0);
    let refused = refusal(connect(&token.path("token"), &ca2.pem()), "a world-readable file");
    assert!(refused.contains("chmod 600"), "{refused}");
    let second_file = plain_token(tmp.path(), "second-token", second);
    let mut kept = connect(&second_file, &ca2.pem()).unwrap();
    assert!(running(&mut kept).contains(&id), "the old token and certificate stay in use");

    // SIGHUP reads everything again: the broken files fail again, nothing ends.
    assert_eq!(unsafe { libc::kill(daemon.pid as i32, libc::SIGHUP) }, 0);
    eventually(RELOAD_WITHIN, "the SIGHUP's failures logged", || (logged() == 4).then_some(()));
    assert_eq!(metric(&url, second, &ca2.pem(), "stockade_reload_failures_total"), 4.0);
    // Fixed: the next change is taken.
    token.update(&[("token", &b"fourth-token-0123456789abcdef"[..])], 0o600);
    eventually(RELOAD_WITHIN, "the fixed token to be taken", || {
        connect(&token.path("token"), &ca2.pem()).ok()
    });
    assert!(connect(&second_file, &ca2.pem()).is_err(), "the second token is refused now");
    for client in [&mut held, &mut fresh, &mut kept] {
        assert!(running(client).contains(&id), "every connection is still served");
    }
    let kill = held.call::<method::Kill>(KillParams { id, ..KillParams::default() }).unwrap();
    assert!(kill.report.terminated);
    eprintln!("rotation: the token taken in {took:?}, the certificate in {took_cert:?}");
}

#[test]
fn sighup_never_ends_a_daemon_without_a_door() {
    let mut daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    let id = rpc.ok("run", serde_json::json!({"command": "sleep 600", "background": true}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..3 {
        assert_eq!(unsafe { libc::kill(daemon.pid as i32, libc::SIGHUP) }, 0);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon is alive after SIGHUP");
    let list = daemon.client().ok("list", serde_json::json!({}));
    let state = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id.as_str());
    assert_eq!(state.unwrap()["state"], "running", "{list}");
    rpc.ok("kill", serde_json::json!({"id": id}));
}

/// One sandbox of the fleet: its token and certificate mounted as Secrets, an audit log.
struct Member {
    sandbox: Sandbox,
    token: SecretDir,
    tls: SecretDir,
}

impl Member {
    /// The sandbox with its daemon not yet started (its first token and certificate are the
    /// ones `Sandbox::new` made, so `Sandbox::launch` can wait for it as usual).
    fn new(ca: &Ca) -> Member {
        let sandbox = Sandbox::new(ca, Root::Host);
        let root = sandbox.root_dir();
        let first = std::fs::read(sandbox.token_file()).unwrap();
        let token = SecretDir::new(root.join("secret"), &[("token", first.as_slice())]);
        let pair: Vec<_> = ["cert.pem", "key.pem"]
            .into_iter()
            .map(|name| (name, std::fs::read(root.join("tls").join(name)).unwrap()))
            .collect();
        let tls = SecretDir::new(root.join("tls-secret"), &files(&pair));
        Member { sandbox, token, tls }
    }

    fn start(&mut self) {
        let r = self.sandbox.root_dir();
        let r = r.display();
        let script = format!(
            "mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc && cd {r} && mount -t proc proc /proc && exec {bin} --home {r}/state daemon run --no-cgroup --ws {ip}:{PORT} --token-file {r}/secret/token --tls-cert {r}/tls-secret/cert.pem --tls-key {r}/tls-secret/key.pem --audit-log {r}/audit.log",
            bin = stockade_testkit::stockade_bin().display(),
            ip = self.sandbox.ip
        );
        self.sandbox.launch(&script);
    }

    fn client(&self, token: &Path, ca: &Path) -> Result<Client, stockade_client::ClientError> {
        let home = self.sandbox.dir.path().join("client-home");
        Client::connect(&options(&home, &self.sandbox.url(), token, ca))
    }

    /// The audit log's `run` lines: (command, token id).
    fn runs(&self) -> Vec<(String, String)> {
        let log = std::fs::read_to_string(self.sandbox.root_dir().join("audit.log")).unwrap();
        log.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|l| l["method"] == "run")
            .map(|l| (l["command"].as_str().unwrap().to_owned(), l["token_id"].to_string()))
            .collect()
    }
}

#[test]
fn a_fleet_rotates_its_token_and_certificate_without_losing_a_session() {
    if !namespaces_usable() {
        return;
    }
    const DAEMONS: usize = 16;
    const SESSIONS: usize = 50;
    let started = Instant::now();
    let (ca1, ca2) = (Ca::new(), Ca::new());
    // One at a time: the CA's serial file is written by each `openssl x509`.
    let mut fleet: Vec<Member> = (0..DAEMONS).map(|_| Member::new(&ca1)).collect();
    std::thread::scope(|scope| {
        for member in &mut fleet {
            scope.spawn(move || member.start());
        }
    });
    let namespaces: Vec<PathBuf> = fleet.iter().map(|m| m.sandbox.pid_ns().unwrap()).collect();
    let up = started.elapsed();

    // 50 sleeping sessions on each daemon; one connection per daemon stays open throughout.
    let command = |d: usize, k: usize| format!("echo fleet-{d}-{k}; sleep 600");
    // A foreground command run after the rotation, with the new token.
    let after = |d: usize| format!("echo fleet-{d}-after-the-rotation");
    let mut held: Vec<(Client, BTreeSet<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = fleet
            .iter()
            .enumerate()
            .map(|(d, m)| {
                let command = &command;
                let ca1 = ca1.pem();
                scope.spawn(move || {
                    let mut client = m.client(&m.token.path("token"), &ca1).unwrap();
                    let ids = (0..SESSIONS)
                        .map(|k| {
                            let p = RunParams {
                                command: command(d, k),
                                background: true,
                                ..RunParams::default()
                            };
                            client.call::<method::Run>(p).unwrap().id
                        })
                        .collect::<BTreeSet<_>>();
                    (client, ids)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let loaded = started.elapsed();

    // Rotate: a new token and a certificate of another CA, each a kubelet Secret update.
    let old_token = fleet[0].sandbox.token_file();
    for (d, m) in fleet.iter_mut().enumerate() {
        let pair = issued(&ca2, &m.sandbox.ip);
        m.tls.update(&files(&pair), 0o600);
        m.token.update(&[("token", format!("rotated-token-{d}-0123456789").as_bytes())], 0o600);
    }
    let rotated = Instant::now();

    // Every daemon: the new token and CA let a new client in, the old token and the old CA do
    // not; every session is still running, seen from the new connection and the held one.
    std::thread::scope(|scope| {
        for (d, (m, (held, ids))) in fleet.iter().zip(held.iter_mut()).enumerate() {
            let (ca1, ca2, old_token, after) = (ca1.pem(), ca2.pem(), &old_token, &after);
            scope.spawn(move || {
                let token = m.token.path("token");
                let mut fresh = eventually(RELOAD_WITHIN, "the new token and certificate", || {
                    m.client(&token, &ca2).ok()
                });
                let old = refusal(m.client(old_token, &ca2), "the old token");
                assert!(old.contains("token was not accepted"), "{d}: {old}");
                assert!(m.client(&token, &ca1).is_err(), "{d}: the old CA no longer verifies");
                assert_eq!(running(&mut fresh), *ids, "daemon {d}: every session still runs");
                assert_eq!(running(held), *ids, "daemon {d}: the held connection still works");
                // Two reloads (the token, the certificate and key), none failed.
                let new_token = std::fs::read_to_string(&token).unwrap();
                let count = |name| metric(&m.sandbox.url(), new_token.trim(), &ca2, name);
                assert_eq!(count("stockade_reloads_total"), 2.0, "daemon {d}");
                assert_eq!(count("stockade_reload_failures_total"), 0.0, "daemon {d}");
                let after = RunParams { command: after(d), ..RunParams::default() };
                fresh.call::<method::Run>(after).unwrap();
            });
        }
    });
    let reconnected = rotated.elapsed();
    let total: usize = held.iter().map(|(_, ids)| ids.len()).sum();
    assert_eq!(total, DAEMONS * SESSIONS, "0 sessions lost");

    // The audit log: each command once, the first 50 under the old token's id, the one after
    // the rotation under the new one's.
    for (d, m) in fleet.iter().enumerate() {
        let runs = eventually(RELOAD_WITHIN, "the audit lines written", || {
            let runs = m.runs();
            (runs.len() > SESSIONS).then_some(runs)
        });
        assert_eq!(runs.len(), SESSIONS + 1, "daemon {d}: one line per command");
        let commands: BTreeSet<String> = runs.iter().map(|(c, _)| c.clone()).collect();
        let want: BTreeSet<String> =
            (0..SESSIONS).map(|k| command(d, k)).chain([after(d)]).collect();
        assert_eq!(commands, want, "daemon {d}: every command once");
        let ids: BTreeSet<&String> = runs[..SESSIONS].iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), 1, "daemon {d}: the sessions were started with one token");
        assert_ne!(runs[SESSIONS].1, runs[0].1, "daemon {d}: the new token's id after rotation");
        assert!(!m.sandbox.log().contains("could not reload"), "{}", m.sandbox.log());
    }
    drop(held);
    drop(fleet);
    for ns in &namespaces {
        eventually(Duration::from_secs(20), "every process of the fleet gone", || {
            processes_in(ns).is_empty().then_some(())
        });
    }
    eprintln!(
        "rotated fleet: {DAEMONS} daemons up in {up:?}, {total} sessions started by {loaded:?}, all reconnected with the new token and certificate {reconnected:?} after the rotation, 0 lost; {:?} in all",
        started.elapsed()
    );
}
