//! A network door served outside this crate (the E2B door, `daemon run --e2b`), set up by the
//! daemon as its own listeners are: its token file read under the same rules and reloaded with
//! the other credentials (`reload`: a changed file or SIGHUP), its certificate and key the same
//! way, both hidden from sandboxed commands, and its connections handed over through the
//! daemon's one TLS acceptor, each handshake bounded in time, and at most
//! [`MAX_CONNECTIONS`] connections open at once (more wait in the kernel's accept queue, so a
//! flood cannot take the descriptors the Unix socket's clients need).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::config::{E2bConfig, MAX_CONNECTIONS};
use crate::error::WsSetupError;
use crate::hall::Hall;
use crate::reload::{Credentials, LiveTls, LiveToken};
use crate::tls::DoorStream;

/// Longest a connection's TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Connections handshaken and waiting for the server to take them.
const READY_QUEUE: usize = 64;

/// The E2B door's listener, bound by the daemon, served by the door's own router.
pub struct OuterDoor {
    listener: TcpListener,
    addr: SocketAddr,
    key: DoorKey,
    tls: Option<LiveTls>,
    hall: Hall,
}

/// The token a door's requests must present, as reloaded (cheap to clone).
#[derive(Clone)]
pub struct DoorKey(LiveToken);

impl std::fmt::Debug for DoorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorKey(<redacted>)")
    }
}

impl DoorKey {
    /// The fingerprint of the token (for the audit log) when `presented` is the one in force now,
    /// compared in constant time; `None` otherwise.
    pub fn check(&self, presented: &[u8]) -> Option<String> {
        let token = self.0.get();
        token.presented(presented).then(|| token.id())
    }
}

/// Reads the door's credentials (reloaded with `credentials` from then on) and binds its address.
pub(crate) fn bind(
    config: &E2bConfig,
    credentials: &mut Credentials,
) -> Result<(TcpListener, SocketAddr, DoorKey, Option<LiveTls>), WsSetupError> {
    let token = credentials.token("the E2B door's token", &config.token_file)?;
    let (loopback, tls) = (config.addr.ip().is_loopback(), config.tls.is_some());
    if !loopback && !tls && !config.insecure_plaintext {
        return Err(WsSetupError::E2bPlaintext { addr: config.addr });
    }
    let tls = config.tls.as_ref().map(|files| credentials.tls(files)).transpose()?;
    let bind_err = |source| WsSetupError::E2bBind { addr: config.addr, source };
    let std_listener = std::net::TcpListener::bind(config.addr).map_err(bind_err)?;
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    let addr = std_listener.local_addr().map_err(bind_err)?;
    let listener = TcpListener::from_std(std_listener).map_err(bind_err)?;
    Ok((listener, addr, DoorKey(token), tls))
}

impl OuterDoor {
    pub(crate) fn new(
        (listener, addr, key, tls): (TcpListener, SocketAddr, DoorKey, Option<LiveTls>),
        hall: Hall,
    ) -> OuterDoor {
        OuterDoor { listener, addr, key, tls, hall }
    }

    /// The address bound (the port actually taken).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the door serves HTTPS.
    pub fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The hall the door's requests pass.
    pub fn hall(&self) -> Hall {
        self.hall.clone()
    }

    /// The token the door's requests must present.
    pub fn key(&self) -> DoorKey {
        self.key.clone()
    }

    /// The door's connections, for `axum::serve`: accepted while fewer than
    /// [`MAX_CONNECTIONS`] are open, with TLS (the certificate in force when each handshake
    /// starts) when the door has it.
    pub fn incoming(self) -> Incoming {
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let (listener, tls) = (self.listener, self.tls);
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "E2B door accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let (tls, ready) = (tls.as_ref().map(|t| t.get()), tx.clone());
                tokio::spawn(async move {
                    let handshake = crate::tls::accept(stream, tls.as_deref(), peer);
                    if let Ok(Some(stream)) = tokio::time::timeout(HANDSHAKE, handshake).await {
                        let _ = ready.send((Gated { stream, _slot: slot }, peer)).await;
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Incoming { ready, addr: self.addr }
    }
}

/// The accepted connections of an [`OuterDoor`].
pub struct Incoming {
    ready: mpsc::Receiver<(Gated, SocketAddr)>,
    addr: SocketAddr,
}

impl axum::serve::Listener for Incoming {
    type Io = Gated;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task has ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

/// A connection of an outside door, holding its place among the open ones until it closes.
pub struct Gated {
    stream: DoorStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Gated {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
