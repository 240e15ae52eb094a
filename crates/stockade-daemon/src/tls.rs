//! TLS on the network listeners (rustls, ring provider) and the stream every connection there is
//! served over: plain TCP or TLS.
//!
//! A door on a non-loopback address needs TLS or an explicit `--insecure-plaintext`: the token
//! and every byte of output would otherwise cross the network in clear.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::error::WsSetupError;

/// The certificate chain and key of a TLS door (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Refuse a clear-text door that other machines can reach, unless the operator said so.
pub(crate) fn check_plaintext(
    addr: SocketAddr,
    tls: bool,
    insecure_plaintext: bool,
) -> Result<(), WsSetupError> {
    if tls || insecure_plaintext || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(WsSetupError::Plaintext { addr })
}

/// Load the certificate and key into an acceptor.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, WsSetupError> {
    let problem =
        |path: &Path, problem: String| WsSetupError::Tls { path: path.to_owned(), problem };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| problem(&files.cert, format!("cannot read it: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| problem(&files.cert, format!("it is not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(problem(&files.cert, "it holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| problem(&files.key, format!("it holds no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| problem(&files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| problem(&files.key, format!("it does not fit the certificate: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The transport under one door connection.
enum Inner {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connection of a network listener: plain or TLS.
pub struct DoorStream {
    inner: Inner,
}

/// The connection as it will be served: the TLS handshake done when the listener has TLS (the
/// caller bounds how long it may take); `None` when it failed.
pub(crate) async fn accept(
    stream: TcpStream,
    tls: Option<&TlsAcceptor>,
    peer: SocketAddr,
) -> Option<DoorStream> {
    let inner = match tls {
        None => Inner::Plain(stream),
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(s) => Inner::Tls(Box::new(s)),
            Err(e) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return None;
            }
        },
    };
    Some(DoorStream { inner })
}

impl AsyncRead for DoorStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for DoorStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_flush(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_clear_text_door_off_loopback_is_refused() {
        let lo: SocketAddr = "127.0.0.1:7433".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7433".parse().unwrap();
        assert!(check_plaintext(lo, false, false).is_ok());
        let err = check_plaintext(any, false, false).unwrap_err().to_string();
        assert!(err.contains("--tls-cert") && err.contains("--insecure-plaintext"), "{err}");
        assert!(check_plaintext(any, true, false).is_ok());
        assert!(check_plaintext(any, false, true).is_ok());
    }
}
