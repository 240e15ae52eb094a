//! Reaching a remote daemon through its WebSocket door: the URL (`ws://HOST:PORT` or
//! `wss://HOST:PORT`), the bearer token read from a private file, TLS with rustls (the system's
//! roots, or a private CA from `--ca-file`), and the HTTP upgrade.

use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tungstenite::client::IntoClientRequest as _;
use tungstenite::http::{HeaderValue, header};
use tungstenite::protocol::WebSocketConfig;

use crate::error::ClientError;
use crate::transport::{NetStream, Transport};

/// Where a remote daemon is and how to prove who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOptions {
    /// `ws://HOST:PORT[/PATH]` or `wss://HOST:PORT[/PATH]`.
    pub url: String,
    /// The file holding the daemon's token (mode 0600 or stricter).
    pub token_file: PathBuf,
    /// PEM file of the CA that signed the daemon's certificate (default: the system's roots).
    pub ca_file: Option<PathBuf>,
}

impl RemoteOptions {
    /// Options for `url` with the token in `token_file`.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> RemoteOptions {
        RemoteOptions { url: url.into(), token_file: token_file.into(), ca_file: None }
    }
}

/// Read the token under the one token-file rule the daemon applies too
/// ([`stockade_proto::token`]): a private regular file of this user's, never through a symlink.
fn load_token(path: &Path) -> Result<Vec<u8>, ClientError> {
    stockade_proto::token::read_token_file(path)
        .map_err(|e| ClientError::TokenFile { path: path.to_owned(), problem: e.to_string() })
}

/// The TLS settings for `wss://`: trust `ca_file` only, or else the system's roots.
fn tls_config(ca_file: Option<&Path>, url: &str) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let tls = |detail: String| ClientError::Tls { url: url.to_owned(), detail };
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls(format!("cannot read the CA file {}: {e}", path.display())))?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    tls(format!("the CA file {} is not PEM certificates: {e}", path.display()))
                })?;
                roots.add(cert).map_err(|e| {
                    tls(format!("a certificate in {} is unusable: {e}", path.display()))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let _ = roots.add_parsable_certificates(found.certs);
        }
    }
    if roots.is_empty() {
        return Err(tls("no trusted certificate authority; pass --ca-file".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Connect to the door at `remote.url`, present the token and upgrade. `max_message` bounds an
/// answer; `timeout` bounds the TCP connect, the TLS handshake and the upgrade.
pub(crate) fn connect(
    remote: &RemoteOptions,
    timeout: Duration,
    max_message: usize,
    watch: &mut crate::watch::DaemonWatch,
) -> Result<Transport, ClientError> {
    let url = remote.url.as_str();
    let bad =
        |problem: &str| ClientError::BadRemote { url: url.to_owned(), problem: problem.into() };
    let (tls, rest) = if let Some(rest) = url.strip_prefix("wss://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("ws://") {
        (false, rest)
    } else {
        return Err(bad("it must start with ws:// or wss://"));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("it must name a host and port, like ws://10.0.0.5:7433"));
    }
    let (host, port) = split_host_port(authority).ok_or_else(|| bad("it must name a port"))?;
    let token = load_token(&remote.token_file)?;

    let unreachable = |detail: String| ClientError::RemoteConnect { url: url.to_owned(), detail };
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| unreachable(format!("cannot resolve {host}: {e}")))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        unreachable(last.map_or_else(|| format!("{host} has no address"), |e| e.to_string()))
    })?;
    let io = |e: std::io::Error| unreachable(e.to_string());
    tcp.set_nodelay(true).map_err(io)?;
    tcp.set_read_timeout(Some(timeout)).map_err(io)?;
    tcp.set_write_timeout(Some(timeout)).map_err(io)?;
    let stream = if tls {
        let config = tls_config(remote.ca_file.as_deref(), url)?;
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| bad("its host is not a valid TLS server name"))?;
        let conn = rustls::ClientConnection::new(config, name)
            .map_err(|e| ClientError::Tls { url: url.to_owned(), detail: e.to_string() })?;
        NetStream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
    } else {
        NetStream::Plain(tcp)
    };
    let mut request = url.into_client_request().map_err(|e| bad(&e.to_string()))?;
    let bearer = HeaderValue::from_bytes(&[&b"Bearer "[..], &token].concat()).map_err(|_| {
        ClientError::TokenFile {
            path: remote.token_file.clone(),
            problem: "the token has characters an HTTP header cannot carry".into(),
        }
    })?;
    request.headers_mut().insert(header::AUTHORIZATION, bearer);
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    // The upgrade in slices: a daemon stopped on this machine is named within one.
    let deadline = std::time::Instant::now() + timeout;
    let slice = |tcp: &TcpStream| {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        tcp.set_read_timeout(Some(left.clamp(Duration::from_millis(1), crate::watch::LOOK_EVERY)))
    };
    slice(stream_tcp(&stream)).map_err(io)?;
    let mut shake = tungstenite::client::client_with_config(request, stream, Some(config));
    loop {
        match shake {
            Ok((ws, _)) => {
                ws.get_ref().tcp_ref().set_read_timeout(Some(timeout)).map_err(io)?;
                return Ok(Transport::Ws(Box::new(ws)));
            }
            Err(tungstenite::HandshakeError::Failure(e)) => return Err(handshake_error(url, e)),
            Err(tungstenite::HandshakeError::Interrupted(mid)) => {
                if let Some(pid) = watch.stopped() {
                    return Err(ClientError::DaemonStopped {
                        pid,
                        method: "connect".into(),
                        sent: false,
                    });
                }
                if std::time::Instant::now() >= deadline {
                    return Err(unreachable("the upgrade did not finish in time".into()));
                }
                slice(stream_tcp(mid.get_ref().get_ref())).map_err(io)?;
                shake = mid.handshake();
            }
        }
    }
}

/// The TCP connection under a door's stream.
fn stream_tcp(stream: &NetStream) -> &TcpStream {
    stream.tcp_ref()
}

/// Word a failed upgrade: a refused token, a full daemon, TLS trouble or a network error.
fn handshake_error(url: &str, e: tungstenite::Error) -> ClientError {
    match e {
        tungstenite::Error::Http(resp) => {
            let body = resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).trim().to_owned())
                .unwrap_or_default();
            ClientError::RemoteRefused { url: url.to_owned(), status: resp.status().as_u16(), body }
        }
        tungstenite::Error::Io(e) if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) => {
            ClientError::Tls { url: url.to_owned(), detail: e.to_string() }
        }
        other => ClientError::RemoteConnect { url: url.to_owned(), detail: other.to_string() },
    }
}

/// `host:port`, `[v6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, port) = rest.split_once("]:")?;
        return Some((host, port.parse().ok()?));
    }
    let (host, port) = authority.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn host_and_port_are_split() {
        assert_eq!(split_host_port("10.0.0.5:7433"), Some(("10.0.0.5", 7433)));
        assert_eq!(split_host_port("[::1]:80"), Some(("::1", 80)));
        assert_eq!(split_host_port("host"), None);
        assert_eq!(split_host_port("host:x"), None);
    }

    #[test]
    fn a_bad_url_is_one_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let remote = RemoteOptions::new("http://x:1", dir.path().join("t"));
        let mut watch = crate::watch::DaemonWatch::Remote;
        let err = connect(&remote, Duration::from_secs(1), 1024, &mut watch).unwrap_err();
        assert!(err.to_string().contains("ws:// or wss://"), "{err}");
    }

    #[test]
    fn a_readable_token_file_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "tok-0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_token(&path).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_token(&path).unwrap(), b"tok-0123456789abcdef");
    }
}
