//! What the remote tests share: a daemon started the way a container runtime starts one —
//! `stockade daemon run` as PID 1 of new PID and mount namespaces, inside its own network
//! namespace reached over a veth pair, optionally chrooted into a minimal root (Debian's
//! busybox-static for `/bin/sh`, the binary and the libraries `ldd` names) — with a TLS door
//! (certificates from a test CA made with `openssl`). Everything is torn down on drop: killing
//! the namespace's PID 1 ends every process in it, then the network namespace is deleted.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use stockade_client::{Client, ConnectOptions, RemoteOptions};
use stockade_testkit::{cannot_run, eventually, stockade_bin};

/// The port every door listens on inside its namespace.
pub const PORT: u16 = 7433;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `target/deploy-deps/busybox`, installed by `tests/deploy/install-deps.sh`.
pub fn busybox() -> PathBuf {
    let path = repo_root().join("target/deploy-deps/busybox");
    assert!(
        path.exists(),
        "busybox-static is not installed at {}: run the tests with ./scripts/test, which installs it",
        path.display()
    );
    path
}

/// The deploy venv's python (kubernetes-validate, prometheus-client, jsonschema, PyYAML).
pub fn deploy_python() -> PathBuf {
    let path = repo_root().join("target/deploy-venv/bin/python");
    assert!(
        path.exists(),
        "the deploy test venv is missing at {}: run the tests with ./scripts/test, which installs it",
        path.display()
    );
    path
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sh(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether namespaces, veth pairs and chroot can be used here; says why not otherwise.
pub fn namespaces_usable() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        cannot_run("the remote namespace tests need root (unshare, ip netns, chroot)");
        return false;
    }
    for tool in ["ip", "unshare", "chroot", "openssl", "ldd"] {
        if sh(Command::new("sh").args(["-c", &format!("command -v {tool}")])).is_err() {
            cannot_run(&format!("the remote namespace tests need `{tool}`"));
            return false;
        }
    }
    true
}

/// A test CA and what it signs.
pub struct Ca {
    dir: tempfile::TempDir,
}

impl Ca {
    pub fn new() -> Ca {
        let dir = tempfile::tempdir().unwrap();
        sh(Command::new("openssl").current_dir(dir.path()).args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=stockade test CA",
        ]))
        .unwrap();
        Ca { dir }
    }

    pub fn pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A certificate and key for `ip`, written as `cert.pem`/`key.pem` into `into`.
    pub fn issue(&self, ip: &str, into: &Path) {
        let d = self.dir.path();
        let ext = d.join(format!("{ip}.ext"));
        std::fs::write(&ext, format!("subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\n"))
            .unwrap();
        let key = into.join("key.pem");
        let csr = d.join(format!("{ip}.csr"));
        sh(Command::new("openssl")
            .args([
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=stockade daemon",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&csr))
        .unwrap();
        sh(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(self.pem())
            .arg("-CAkey")
            .arg(d.join("ca.key"))
            .arg("-out")
            .arg(into.join("cert.pem"))
            .arg("-extfile")
            .arg(&ext))
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// How a sandbox's root looks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// A minimal root: busybox, the binary and its libraries only.
    Minimal,
    /// The host's root (for clients that need more than busybox in the sessions, e.g. python).
    Host,
}

/// One daemon as PID 1 in its own PID, mount and network namespaces.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub netns: String,
    host_if: String,
    pub ip: String,
    root: Root,
    launcher: Option<Child>,
    ca_pem: PathBuf,
}

impl Sandbox {
    /// Make the namespace, the veth pair, the root and the certificate; `start` runs the daemon.
    pub fn new(ca: &Ca, root: Root) -> Sandbox {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let netns = format!("stockade-t{pid}-{n}");
        let host_if = format!("sk{}h{n}", pid % 100_000);
        let peer_if = format!("sk{}p{n}", pid % 100_000);
        let (a, b) = (150 + pid % 50, n);
        let (host_ip, ip) = (format!("10.{a}.{b}.1"), format!("10.{a}.{b}.2"));
        let dir = tempfile::Builder::new().prefix("stockade-sandbox-").tempdir().unwrap();
        let sandbox = Sandbox {
            dir,
            netns: netns.clone(),
            host_if: host_if.clone(),
            ip: ip.clone(),
            root,
            launcher: None,
            ca_pem: ca.pem(),
        };
        let ip_cmd = |args: &[&str]| sh(Command::new("ip").args(args)).unwrap();
        ip_cmd(&["netns", "add", &netns]);
        ip_cmd(&["link", "add", &host_if, "type", "veth", "peer", "name", &peer_if]);
        ip_cmd(&["link", "set", &peer_if, "netns", &netns]);
        ip_cmd(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ip_cmd(&["link", "set", &host_if, "up"]);
        let inside = |args: &[&str]| {
            sh(Command::new("ip").args(["netns", "exec", &netns, "ip"]).args(args)).unwrap()
        };
        inside(&["addr", "add", &format!("{ip}/30"), "dev", &peer_if]);
        inside(&["link", "set", &peer_if, "up"]);
        inside(&["link", "set", "lo", "up"]);
        sandbox.build_root();
        let tls = sandbox.root_dir().join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        ca.issue(&ip, &tls);
        let token = sandbox.root_dir().join("token");
        std::fs::write(&token, "fleet-token-0123456789\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        sandbox
    }

    /// The directory the daemon sees as `/` (or holds its files, for a host root).
    pub fn root_dir(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn token_file(&self) -> PathBuf {
        self.root_dir().join("token")
    }

    pub fn ca_file(&self) -> &Path {
        &self.ca_pem
    }

    pub fn url(&self) -> String {
        format!("wss://{}:{PORT}", self.ip)
    }

    fn build_root(&self) {
        let root = self.root_dir();
        for d in ["bin", "proc", "dev", "tmp", "state", "etc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        if self.root == Root::Host {
            return;
        }
        let bb = root.join("bin/busybox");
        std::fs::copy(busybox(), &bb).unwrap();
        // A child another test thread forks while the copy is open for writing holds that
        // descriptor until it execs: running the new file can fail with ETXTBSY meanwhile.
        let list = eventually(Duration::from_secs(10), "busybox runs", || {
            match sh(Command::new(&bb).arg("--list")) {
                Ok(list) => Some(list),
                Err(e) if e.contains("os error 26") => None, // ETXTBSY: try again
                Err(e) => panic!("{e}"),
            }
        });
        for applet in list.lines().filter(|a| !a.is_empty() && *a != "busybox") {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
        // `STOCKADE_STATIC_BIN` (the static build of scripts/build-static) puts that binary in
        // the root instead: it must run there with no library at all.
        let bin = std::env::var_os("STOCKADE_STATIC_BIN").map_or_else(stockade_bin, PathBuf::from);
        std::fs::copy(&bin, root.join("stockade")).unwrap();
        // A dynamically linked binary brings the libraries it names (the documented minimal
        // dependency set: the C library and the loader); `ldd` fails on a static one.
        let ldd = sh(Command::new("ldd").arg(&bin)).unwrap_or_default();
        if std::env::var_os("STOCKADE_STATIC_BIN").is_some() {
            let dynamic = sh(Command::new("readelf").arg("-d").arg(&bin)).unwrap();
            assert!(!dynamic.contains("(NEEDED)"), "{} is not static: {dynamic}", bin.display());
        }
        for path in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
            let to = root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(path, &to).unwrap();
        }
        std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").unwrap();
    }

    /// Start the daemon: PID 1 of new PID and mount namespaces in this sandbox's network
    /// namespace, serving its door with TLS on the veth address.
    pub fn start(&mut self) {
        assert!(self.launcher.is_none(), "already started");
        let root = self.root_dir();
        let r = root.display();
        // A daemon on the host's root still gets its own /proc (in its private mount namespace):
        // the host's would show the host's processes under pids of the wrong namespace.
        let (program, base) = match self.root {
            Root::Minimal => ("exec chroot . /stockade".to_owned(), String::new()),
            Root::Host => (
                format!("mount -t proc proc /proc && exec {}", stockade_bin().display()),
                r.to_string(),
            ),
        };
        let (state, token, tls) =
            (format!("{base}/state"), format!("{base}/token"), format!("{base}/tls"));
        // In the new mount namespace: the host's /dev (PTYs, /dev/null) bound into the root,
        // /proc of the new PID namespace; then exec, so the daemon stays PID 1.
        let script = format!(
            "mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc && cd {r} && {program} --home {state} daemon run --no-cgroup --ws {ip}:{PORT} --token-file {token} --tls-cert {tls}/cert.pem --tls-key {tls}/key.pem",
            ip = self.ip
        );
        self.launch(&script);
    }

    /// Runs `script` (as root, in new PID and mount namespaces of this sandbox's network
    /// namespace; it must end by exec-ing the daemon, so the daemon is PID 1) and waits until
    /// the daemon's door accepts a client.
    pub fn launch(&mut self, script: &str) {
        assert!(self.launcher.is_none(), "already started");
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns, "unshare", "--pid", "--mount", "--fork"])
            .args(["--kill-child", "--propagation", "private", "sh", "-c", script])
            .env_clear()
            .env("PATH", "/bin:/usr/bin:/sbin:/usr/sbin")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.launcher = Some(child);
        let url = self.url();
        eventually(Duration::from_secs(30), &format!("the daemon at {url} to accept"), || {
            if let Some(status) = self.launcher.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("the sandbox daemon exited ({status}): {}", self.log());
            }
            Client::connect(&self.connect_options()).ok()
        });
    }

    /// The launcher's exit status once it has ended (the daemon, PID 1, has then ended too).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.launcher.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// The daemon's pid in the host's PID namespace (the launcher's one child).
    pub fn daemon_host_pid(&self) -> Option<u32> {
        let launcher = self.launcher.as_ref()?.id();
        let children =
            std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Host pids of every live (non-zombie) process in the daemon's PID namespace.
    pub fn processes(&self) -> Vec<u32> {
        self.pid_ns().map(|ns| processes_in(&ns)).unwrap_or_default()
    }

    /// The daemon's PID namespace (`pid:[inode]`), while the daemon runs.
    pub fn pid_ns(&self) -> Option<PathBuf> {
        let pid = self.daemon_host_pid()?;
        std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
    }

    /// SIGKILL the daemon (PID 1 of its namespace: the kernel ends everything in it).
    pub fn sigkill(&mut self) {
        if let Some(pid) = self.daemon_host_pid() {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(mut c) = self.launcher.take() {
            let _ = stockade_testkit::child::wait_bounded(&mut c, Duration::from_secs(20));
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn connect_options(&self) -> ConnectOptions {
        let mut opts = ConnectOptions::new(self.dir.path().join("client-home"));
        opts.autostart = false;
        opts.start_timeout = Duration::from_secs(5);
        let mut remote = RemoteOptions::new(self.url(), self.token_file());
        remote.ca_file = Some(self.ca_pem.clone());
        opts.remote = Some(remote);
        opts
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.connect_options()).unwrap()
    }

    /// `stockade --remote … --token-file … --ca-file …` ready for a subcommand.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new(stockade_bin());
        c.arg("--home")
            .arg(self.dir.path().join("cli-home"))
            .arg("--remote")
            .arg(self.url())
            .arg("--token-file")
            .arg(self.token_file())
            .arg("--ca-file")
            .arg(&self.ca_pem)
            .args(args)
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.sigkill();
        let _ = sh(Command::new("ip").args(["netns", "del", &self.netns]));
        let _ = sh(Command::new("ip").args(["link", "del", &self.host_if]));
    }
}

/// Host pids of every live (non-zombie) process in the PID namespace `ns` (see
/// [`Sandbox::pid_ns`]); still answers after the namespace's PID 1 has ended.
pub fn processes_in(ns: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{p}/ns/pid")).ok().as_deref() == Some(ns)
            && stockade_client::pid_alive(p)
        {
            out.push(p);
        }
    }
    out
}

/// Runs `tests/deploy/validate.py` (with `extra` arguments, e.g. `--crd FILE`) on a `deploy/`
/// directory: whether it passed, and everything it printed.
pub fn validate_deploy(extra: &[&std::ffi::OsStr], dir: &Path) -> (bool, String) {
    let out = Command::new(deploy_python())
        .arg(repo_root().join("tests/deploy/validate.py"))
        .args(extra)
        .arg(dir)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A copy of `deploy/` with `from` replaced by `to` (once) in `file`.
pub fn broken_deploy(file: &str, from: &str, to: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["kubernetes", "agent-sandbox"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        for entry in std::fs::read_dir(repo_root().join("deploy").join(sub)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(sub).join(entry.file_name())).unwrap();
        }
    }
    let path = dir.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    dir
}
