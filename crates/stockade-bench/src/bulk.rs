//! Bulk reads: a session's whole log read back by cursor through the daemon — over its Unix
//! socket and over its WebSocket door with TLS on loopback (token and CA file, as a remote
//! client) — against `cat` of the spool, in one run. Each path is timed and charged the CPU
//! seconds (user + system, from `/proc`) of the reader and of the daemon.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_client::{Client, ConnectOptions, RemoteOptions};
use stockade_proto::SessionState;
use stockade_proto::rpc::{ReadParams, RunParams, method};

use crate::daemon::{CALL_TIMEOUT, Daemon};
use crate::scale::cpu;
use crate::{BenchError, MIB, Result, mib};

/// Goal: through the daemon on this machine, at least this fraction of `cat`'s speed.
pub const LOCAL_GOAL: f64 = 0.5;
/// Goal: over TLS on loopback, at least this many MiB/s.
pub const WSS_GOAL_MIB_S: f64 = 200.0;
/// Goal: at most this many CPU-seconds (reader + daemon) per GiB read.
pub const CPU_GOAL_PER_GIB: f64 = 2.0;

/// Bytes asked for per read: 4 MiB was faster than 1 MiB and than 16 MiB (the most a binary
/// answer holds) here, in the reader's and the daemon's caches.
const CHUNK: usize = 4 * 1024 * 1024;
/// How long the daemon may take to print its ready line.
const READY_LIMIT: Duration = Duration::from_secs(20);

/// One path's best round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadRow {
    /// `cat`, `unix`, `wss`, or with `--base64` also `unix-base64` and `wss-base64`.
    pub path: String,
    /// Bytes read.
    pub bytes: u64,
    /// Wall seconds of the best round.
    pub seconds: f64,
    /// CPU seconds of the reader in that round.
    pub reader_cpu_s: f64,
    /// CPU seconds of the daemon in that round (0 for `cat`).
    pub daemon_cpu_s: f64,
}

impl ReadRow {
    /// MiB per second.
    pub fn mib_s(&self) -> f64 {
        mib(self.bytes) / self.seconds.max(1e-9)
    }

    /// Reader + daemon CPU seconds per GiB.
    pub fn cpu_per_gib(&self) -> f64 {
        (self.reader_cpu_s + self.daemon_cpu_s) / (self.bytes as f64 / f64::from(1u32 << 30))
    }

    /// The one line printed for it.
    pub fn line(&self) -> String {
        format!(
            "{:<12} {:.0} MiB in {:.3} s = {:.0} MiB/s; CPU {:.2} s reader + {:.2} s daemon = {:.2} CPU-s/GiB",
            self.path,
            mib(self.bytes),
            self.seconds,
            self.mib_s(),
            self.reader_cpu_s,
            self.daemon_cpu_s,
            self.cpu_per_gib()
        )
    }
}

/// The verdicts on the goals, one line each.
pub fn verdicts(rows: &[ReadRow]) -> Vec<String> {
    let find = |p: &str| rows.iter().find(|r| r.path == p);
    let word = |ok: bool| if ok { "met" } else { "NOT met" };
    let mut out = Vec::new();
    if let (Some(cat), Some(unix)) = (find("cat"), find("unix")) {
        let ratio = unix.mib_s() / cat.mib_s();
        out.push(format!(
            "unix socket / cat: {ratio:.2}× (goal ≥ {LOCAL_GOAL}× — {})",
            word(ratio >= LOCAL_GOAL)
        ));
    }
    if let Some(wss) = find("wss") {
        out.push(format!(
            "wss on loopback: {:.0} MiB/s (goal ≥ {WSS_GOAL_MIB_S:.0} MiB/s — {})",
            wss.mib_s(),
            word(wss.mib_s() >= WSS_GOAL_MIB_S)
        ));
    }
    for r in rows.iter().filter(|r| r.path == "unix" || r.path == "wss") {
        out.push(format!(
            "{} CPU: {:.2} CPU-s/GiB (goal ≤ {CPU_GOAL_PER_GIB} — {})",
            r.path,
            r.cpu_per_gib(),
            word(r.cpu_per_gib() <= CPU_GOAL_PER_GIB)
        ));
    }
    out
}

/// Print `bytes` of random data into one session of a daemon with a TLS door, then read it
/// back `rounds` times each way: `cat` of the spool, the Unix socket, the door (`wss://`), and
/// with `base64` the JSON form too. Keeps each path's fastest round; writes `out/read.jsonl`.
pub fn read(
    exe: &Path,
    out: &Path,
    work: &Path,
    bytes: u64,
    rounds: usize,
    base64: bool,
) -> Result<Vec<ReadRow>> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let tmp = crate::speed::tmpdir(work)?;
    let tls = Tls::make(tmp.path())?;
    let home = tmp.path().join("home");
    let door = [
        "--ws",
        "127.0.0.1:0",
        "--token-file",
        path_str(&tls.token)?,
        "--tls-cert",
        path_str(&tls.cert)?,
        "--tls-key",
        path_str(&tls.key)?,
    ];
    let mut daemon = Daemon::start_with(exe, &home, &door)?;
    let url = door_url(&daemon)?;
    let mut local = daemon.client()?;
    let (id, spool) = fill(&mut daemon, &mut local, bytes)?;
    let remote = ConnectOptions {
        remote: Some(RemoteOptions {
            url,
            token_file: tls.token.clone(),
            ca_file: Some(tls.ca.clone()),
        }),
        autostart: false,
        call_timeout: CALL_TIMEOUT,
        ..ConnectOptions::new(&home)
    };
    let mut paths = vec![("cat", None), ("unix", Some(true)), ("wss", Some(true))];
    if base64 {
        paths.extend([("unix-base64", Some(false)), ("wss-base64", Some(false))]);
    }
    let mut rows: Vec<ReadRow> = Vec::new();
    for _ in 0..rounds.max(1) {
        for &(path, binary) in &paths {
            let row = match binary {
                None => cat(&spool, bytes)?,
                Some(binary) => {
                    let mut client = if path.starts_with("wss") {
                        Client::connect(&remote)?
                    } else {
                        daemon.client()?
                    };
                    client.set_binary_reads(binary);
                    through(&mut client, daemon.pid(), &id, &spool, bytes, path)?
                }
            };
            match rows.iter_mut().find(|r| r.path == path) {
                Some(best) if best.seconds <= row.seconds => {}
                Some(best) => *best = row,
                None => rows.push(row),
            }
        }
    }
    drop(local);
    daemon.shutdown();
    let mut text = String::new();
    for r in &rows {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    let path = out.join("read.jsonl");
    std::fs::write(&path, text).map_err(|e| BenchError::path("write", &path, e))?;
    Ok(rows)
}

/// A foreground session printing `bytes` random bytes: its id and spool.
fn fill(daemon: &mut Daemon, client: &mut Client, bytes: u64) -> Result<(String, PathBuf)> {
    let res = client.call::<method::Run>(RunParams {
        command: format!("head -c {bytes} /dev/urandom"),
        max_bytes: Some(1024),
        disk_cap: Some(bytes + 64 * MIB),
        ..RunParams::default()
    })?;
    daemon.track_session(res.pid);
    if res.state != (SessionState::Exited { code: 0 }) || res.view.total_bytes != bytes {
        return Err(BenchError::msg(format!(
            "the session that fills the log ended {} with {} of {bytes} bytes",
            res.state.name(),
            res.view.total_bytes
        )));
    }
    Ok((res.id, PathBuf::from(&res.view.spool_path)))
}

/// Read the whole log through `client` by cursor; checks the length and the first chunk
/// against the spool (outside the timing).
fn through(
    client: &mut Client,
    daemon_pid: u32,
    id: &str,
    spool: &Path,
    bytes: u64,
    path: &str,
) -> Result<ReadRow> {
    let me = std::process::id();
    let (reader0, daemon0) = (cpu(me)?, cpu(daemon_pid)?);
    let t = Instant::now();
    let (mut cursor, mut first) = (0u64, None);
    while cursor < bytes {
        let params = ReadParams {
            id: id.to_owned(),
            after: Some(cursor),
            max_bytes: Some(CHUNK),
            ..ReadParams::default()
        };
        let (answer, chunk) = client.read_bytes(params)?;
        if answer.view.next_cursor <= cursor {
            return Err(BenchError::msg(format!("{path}: the read stopped at byte {cursor}")));
        }
        cursor = answer.view.next_cursor;
        if first.is_none() {
            first = Some(chunk);
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    let (reader1, daemon1) = (cpu(me)?, cpu(daemon_pid)?);
    let first = first.unwrap_or_default();
    let mut expected = vec![0u8; first.len()];
    std::fs::File::open(spool)
        .and_then(|mut f| f.read_exact(&mut expected))
        .map_err(|e| BenchError::path("read", spool, e))?;
    if first != expected || cursor != bytes {
        return Err(BenchError::msg(format!("{path}: the bytes read differ from the spool's")));
    }
    Ok(ReadRow {
        path: path.into(),
        bytes,
        seconds,
        reader_cpu_s: (reader1 - reader0).as_secs_f64(),
        daemon_cpu_s: (daemon1 - daemon0).as_secs_f64(),
    })
}

/// `cat SPOOL` into a pipe this process drains (as a reader of the socket would).
fn cat(spool: &Path, bytes: u64) -> Result<ReadRow> {
    let me = std::process::id();
    let (reader0, children0) = (cpu(me)?, children_cpu());
    let t = Instant::now();
    let mut child = Command::new("cat")
        .arg(spool)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::io("run cat", e))?;
    let mut total = 0u64;
    if let Some(mut pipe) = child.stdout.take() {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::io("read from cat", e)),
            }
        }
    }
    let status = child.wait().map_err(|e| BenchError::io("wait for cat", e))?;
    let seconds = t.elapsed().as_secs_f64();
    if !status.success() || total != bytes {
        return Err(BenchError::msg(format!("cat gave {total} of {bytes} bytes")));
    }
    let reader = (cpu(me)? - reader0) + (children_cpu().saturating_sub(children0));
    Ok(ReadRow {
        path: "cat".into(),
        bytes,
        seconds,
        reader_cpu_s: reader.as_secs_f64(),
        daemon_cpu_s: 0.0,
    })
}

/// CPU time of this process's waited-for children.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The door's `wss://` URL from the daemon's ready line.
fn door_url(daemon: &Daemon) -> Result<String> {
    let mut found = None;
    crate::proc::wait_until(READY_LIMIT, Duration::from_millis(20), || {
        let tail = daemon.stderr_tail();
        found = tail.split_whitespace().find(|w| w.starts_with("wss://")).map(str::to_owned);
        found.is_some()
    });
    let url = found.ok_or_else(|| {
        BenchError::msg(format!(
            "the daemon did not name its wss:// door: {}",
            daemon.stderr_tail()
        ))
    })?;
    Ok(url.trim_end_matches([',', '/']).to_owned())
}

fn path_str(path: &Path) -> Result<&str> {
    path.to_str().ok_or_else(|| BenchError::msg(format!("{} is not UTF-8", path.display())))
}

/// A test CA, a certificate it signed for 127.0.0.1 and a token, made with `openssl`.
struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    token: PathBuf,
}

impl Tls {
    fn make(dir: &Path) -> Result<Tls> {
        let openssl = |args: &[&str]| -> Result<()> {
            let out = Command::new("openssl")
                .current_dir(dir)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| {
                    BenchError::io("run openssl (needed for the wss:// door's certificate)", e)
                })?;
            if out.status.success() {
                return Ok(());
            }
            let why = String::from_utf8_lossy(&out.stderr);
            Err(BenchError::msg(format!("openssl {}: {}", args.join(" "), why.trim())))
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let ca = ["req", "-x509", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2"];
        openssl(&[&ca[..], &ec, &["-subj", "/CN=stockade bench CA"]].concat())?;
        let leaf = ["req", "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=stockade"];
        openssl(&[&leaf[..], &ec].concat())?;
        let ext = dir.join("leaf.ext");
        let text = "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n";
        std::fs::write(&ext, text).map_err(|e| BenchError::path("write", &ext, e))?;
        openssl(&[
            "x509",
            "-req",
            "-days",
            "2",
            "-CAcreateserial",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-out",
            "cert.pem",
            "-extfile",
            "leaf.ext",
        ])?;
        let token = dir.join("token");
        let secret =
            format!("bench-{:032x}", crate::proc::now_ms() ^ u64::from(std::process::id()));
        std::fs::write(&token, secret).map_err(|e| BenchError::path("write", &token, e))?;
        for file in [&token, &dir.join("key.pem")] {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| BenchError::path("chmod 600", file, e))?;
        }
        Ok(Tls {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            token,
        })
    }
}
