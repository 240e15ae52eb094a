//! Credentials replaced while the daemon runs: the door's token, the read-only metrics token, the
//! metrics address's token and the TLS certificate and key are read again on SIGHUP (the binary
//! calls [`Reloader::reload`]) and when their files change.
//!
//! Each credential is a [`Live`] value: a connection takes the current one when it starts (the
//! token when its upgrade or scrape is checked, the certificate when its TLS handshake starts)
//! and keeps what it was let in with, so a reload never ends a connection or a session. A token
//! that was replaced is refused from the moment the new one is in place: there is no grace period.
//!
//! A change is seen by polling each file's identity (device, inode, size, modification and change
//! times, following symlinks) every [`POLL`]. Not inotify: a watch follows an inode, not a path,
//! so the kubelet's update of a Secret volume (a new `..<timestamp>` directory, then the `..data`
//! symlink renamed over, the old directory deleted) leaves a watch on a file that no longer has a
//! name; a watch would have to be on the directory and re-armed after every swap, and some
//! volume types (network and FUSE file systems) send no events at all. A few `stat`s a second
//! cost nothing and see every way a file can be replaced.
//!
//! A reload that fails (the file is unreadable, empty or readable by others; the PEM is not a
//! certificate; the key does not fit) keeps the credential in use, logs one sentence and counts
//! it (`stockade_reload_failures_total`). The identity it failed on is remembered, so the same
//! broken file is not retried every second; the next change, or SIGHUP, tries again. Files that
//! change together (a certificate and its key) are one credential, loaded together: a half
//! updated pair fails once, then loads when the other half arrives.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::error::WsSetupError;
use crate::metrics::Metrics;
use crate::tls::TlsFiles;
use crate::token::WsToken;

/// How often the credentials' files are looked at.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// A value that a reload replaces whole; readers take the current one and keep it as long as
/// they need it.
pub(crate) struct Live<T>(RwLock<Arc<T>>);

impl<T> Live<T> {
    pub(crate) fn new(value: T) -> Live<T> {
        Live(RwLock::new(Arc::new(value)))
    }

    /// The value in use now.
    pub(crate) fn get(&self) -> Arc<T> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}

impl Live<WsToken> {
    /// Whether a request with these headers carries the current token (see
    /// [`WsToken::authorizes`]).
    pub(crate) fn authorizes(
        &self,
        headers: &tokio_tungstenite::tungstenite::http::HeaderMap,
    ) -> bool {
        self.get().authorizes(headers)
    }
}

/// A token every reload reads again.
pub(crate) type LiveToken = Arc<Live<WsToken>>;
/// A TLS certificate and key every reload reads again.
pub(crate) type LiveTls = Arc<Live<TlsAcceptor>>;

/// What one file looked like: a different identity means the file was replaced or written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The identities of `paths` now (`None` for a file that cannot be looked at). Symlinks are
/// followed, so a swapped `..data` symlink shows as the new file's inode.
fn identities(paths: &[PathBuf]) -> Vec<Option<Identity>> {
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p).ok().map(|m| Identity {
                dev: m.dev(),
                ino: m.ino(),
                size: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            })
        })
        .collect()
}

type Load = Box<dyn Fn() -> Result<(), WsSetupError> + Send + Sync>;

/// One credential: its files, what they looked like when last read, and how to read them.
struct Source {
    /// For the log: "the door's token", "the TLS certificate and key".
    what: &'static str,
    paths: Vec<PathBuf>,
    seen: Vec<Option<Identity>>,
    load: Load,
}

/// The credentials a daemon reloads, gathered as its listeners are set up.
#[derive(Default)]
pub(crate) struct Credentials {
    sources: Vec<Source>,
    /// The values already made, by file (one value per file, however many listeners use it).
    tokens: Vec<(PathBuf, LiveToken)>,
    tls: Vec<(TlsFiles, LiveTls)>,
}

impl Credentials {
    /// Read the token in `path` (under the token-file rules) and reload it from then on.
    pub(crate) fn token(
        &mut self,
        what: &'static str,
        path: &Path,
    ) -> Result<LiveToken, WsSetupError> {
        // The same file for two listeners (the door's token on the metrics address): one value.
        if let Some((_, live)) = self.tokens.iter().find(|(p, _)| p == path) {
            return Ok(Arc::clone(live));
        }
        let paths = vec![path.to_owned()];
        // Looked at before reading: a change while it is read is seen by the next poll.
        let seen = identities(&paths);
        let live = Arc::new(Live::new(WsToken::load(path)?));
        let (cell, file) = (Arc::clone(&live), path.to_owned());
        let load: Load = Box::new(move || WsToken::load(&file).map(|t| cell.set(t)));
        self.sources.push(Source { what, paths, seen, load });
        self.tokens.push((path.to_owned(), Arc::clone(&live)));
        Ok(live)
    }

    /// Load the certificate and key and reload them, together, from then on.
    pub(crate) fn tls(&mut self, files: &TlsFiles) -> Result<LiveTls, WsSetupError> {
        if let Some((_, live)) = self.tls.iter().find(|(f, _)| f == files) {
            return Ok(Arc::clone(live));
        }
        let paths = vec![files.cert.clone(), files.key.clone()];
        let seen = identities(&paths);
        let live = Arc::new(Live::new(crate::tls::acceptor(files)?));
        let (cell, pair) = (Arc::clone(&live), files.clone());
        let load: Load = Box::new(move || crate::tls::acceptor(&pair).map(|a| cell.set(a)));
        self.sources.push(Source { what: "the TLS certificate and key", paths, seen, load });
        self.tls.push((files.clone(), Arc::clone(&live)));
        Ok(live)
    }
}

/// Asks a running daemon to read its credentials again (the binary calls it on SIGHUP). Cheap
/// to clone; harmless when the daemon has no credentials.
#[derive(Debug, Clone, Default)]
pub struct Reloader(Arc<Notify>);

impl Reloader {
    /// Read every token file and the certificate and key again now, changed or not.
    pub fn reload(&self) {
        self.0.notify_one();
    }

    /// Reload on every SIGHUP from now on (must be called inside a tokio runtime). With the
    /// handler, SIGHUP is never the end of the process (without one it would be, and as PID 1
    /// it would be ignored), with or without a door.
    pub fn on_sighup(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let reloader = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                reloader.reload();
            }
        });
        Ok(())
    }
}

/// The credentials of a network door served by another process (`stockade mcp --http`), read
/// and reloaded by the mechanism the daemon's own doors use: the same token-file rules, the same
/// poll of each file's identity and SIGHUP ([`Reloader`]), the same constant-time compare
/// ([`DoorKey`](crate::DoorKey)) and TLS acceptor.
#[derive(Default)]
pub struct Keyring {
    credentials: Credentials,
}

/// A certificate and key in force for a door, as reloaded (cheap to clone).
#[derive(Clone)]
pub struct DoorCert(pub(crate) LiveTls);

impl std::fmt::Debug for DoorCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorCert(<certificate and key>)")
    }
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Read the token in `path` (the token-file rules: private to its owner, long enough) and
    /// reload it from then on. `what` names it in the log ("the MCP server's token").
    pub fn token(
        &mut self,
        what: &'static str,
        path: &Path,
    ) -> Result<crate::DoorKey, WsSetupError> {
        self.credentials.token(what, path).map(crate::DoorKey::from_live)
    }

    /// Load the certificate and key and reload them, together, from then on.
    pub fn tls(&mut self, files: &TlsFiles) -> Result<DoorCert, WsSetupError> {
        self.credentials.tls(files).map(DoorCert)
    }

    /// Reload on `reloader` and when a file changes, until `stop` is cancelled.
    pub async fn watch(self, reloader: Reloader, stop: CancellationToken) {
        run(self.credentials, reloader, Metrics::default(), stop).await;
    }
}

/// Reload on request and when a file changes, until `stop` is cancelled.
pub(crate) async fn run(
    mut credentials: Credentials,
    reloader: Reloader,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            () = stop.cancelled() => return,
            () = reloader.0.notified() => true,
            _ = tick.tick() => false,
        };
        if forced {
            tracing::info!(
                credentials = credentials.sources.len(),
                "SIGHUP: reading the tokens and certificates again"
            );
        }
        for source in &mut credentials.sources {
            let now = identities(&source.paths);
            if !forced && now == source.seen {
                continue;
            }
            // Remembered whether the load works or not: a broken file is tried again when it
            // changes (or on SIGHUP), not every second.
            source.seen = now;
            match (source.load)() {
                Ok(()) => {
                    metrics.reloaded(true);
                    tracing::info!("reloaded {}", source.what);
                }
                Err(e) => {
                    metrics.reloaded(false);
                    tracing::warn!(
                        "could not reload {}, so the one read before stays in use (sessions and connections are not affected): {e}",
                        source.what
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn write_token(path: &Path, token: &str) {
        std::fs::write(path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    fn bearer(token: &str) -> tokio_tungstenite::tungstenite::http::HeaderMap {
        let mut headers = tokio_tungstenite::tungstenite::http::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn a_kubelet_swap_is_a_new_identity_and_a_bad_file_keeps_the_old_token() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("..v1")).unwrap();
        write_token(&d.join("..v1/token"), "first-token-0123456789");
        std::os::unix::fs::symlink("..v1", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/token", d.join("token")).unwrap();
        let mut creds = Credentials::default();
        let live = creds.token("the door's token", &d.join("token")).unwrap();
        assert!(live.authorizes(&bearer("first-token-0123456789")));
        let source = &mut creds.sources[0];
        assert_eq!(identities(&source.paths), source.seen, "unchanged");

        // The kubelet's update: a new directory, the `..data` symlink renamed over.
        std::fs::create_dir(d.join("..v2")).unwrap();
        write_token(&d.join("..v2/token"), "second-token-0123456789");
        std::os::unix::fs::symlink("..v2", d.join("..data_tmp")).unwrap();
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        std::fs::remove_dir_all(d.join("..v1")).unwrap();
        assert_ne!(identities(&source.paths), source.seen, "the swap is seen");
        (source.load)().unwrap();
        assert!(live.authorizes(&bearer("second-token-0123456789")));
        assert!(!live.authorizes(&bearer("first-token-0123456789")));

        // A token file others can read is refused; the token in use stays.
        std::fs::set_permissions(d.join("..v2/token"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let err = (source.load)().unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        assert!(live.authorizes(&bearer("second-token-0123456789")));
    }
}
