//! TLS on the E2B door, as on the WebSocket door: a PEM certificate chain and key, rustls with
//! the ring provider. Handshakes run in their own tasks, each bounded in time, so a client that
//! stalls its handshake holds up no one else's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::E2bError;

/// Longest a TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const READY_QUEUE: usize = 64;
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Loads the certificate chain and key into an acceptor.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, E2bError> {
    let problem = |path: &Path, problem: String| E2bError::Tls { path: path.to_owned(), problem };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| problem(cert, format!("cannot read it: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| problem(cert, format!("it is not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(problem(cert, "it holds no certificate".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| problem(key, format!("it holds no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| problem(cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| problem(key, format!("it does not fit the certificate: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The certificate and key files of a TLS door.
#[derive(Debug, Clone)]
pub struct TlsPaths {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
}

/// A listener whose connections arrive handshaken.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and handshakes each connection in its own task.
    pub fn new(tcp: TcpListener, addr: SocketAddr, acceptor: TlsAcceptor) -> TlsListener {
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(_) => {
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let (acceptor, ready) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await
                    {
                        let _ = ready.send((tls, peer)).await;
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        TlsListener { ready, addr }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task has ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
