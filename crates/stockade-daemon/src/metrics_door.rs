//! The separate metrics address (`--metrics ADDR`): `GET /metrics`, `/healthz` and `/readyz`
//! on a listener of their own, for a scraper or a kubelet that should not reach the WebSocket
//! door. The requests are answered by the same router as on the door (`http`), with no
//! WebSocket.
//!
//! Token rules: on a loopback address `/metrics` needs no token (only this machine, or this
//! pod, reaches it); anywhere else it needs the door's bearer token or the read-only metrics
//! token (`--metrics-token-file`), and clear text is refused
//! unless the operator asked for it, as on the door (`docs/deploy.md`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::MetricsConfig;
use crate::error::WsSetupError;
use crate::http::Doorway;
use crate::reload::{Credentials, LiveTls, LiveToken};
use crate::state::Shared;

/// How long a client has for TLS and its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);

/// Most metrics connections served at once; more are closed unanswered (a scrape is one short
/// request, so only a flood reaches this).
const MAX_CONNECTIONS: usize = 16;

/// A bound metrics listener.
pub(crate) struct MetricsListener {
    listener: TcpListener,
    addr: SocketAddr,
    /// The tokens a scrape may present; none: no token is asked (loopback).
    tokens: Vec<LiveToken>,
    tls: Option<LiveTls>,
    slots: Arc<Semaphore>,
}

impl MetricsListener {
    /// Check the token and TLS rules, read the token (to be reloaded with `credentials`) and
    /// bind; `scrape` is the read-only metrics token, taken beside the door's. Must be called
    /// inside a tokio runtime.
    pub(crate) fn bind(
        config: &MetricsConfig,
        scrape: Option<&LiveToken>,
        credentials: &mut Credentials,
    ) -> Result<MetricsListener, WsSetupError> {
        let loopback = config.addr.ip().is_loopback();
        let mut tokens = Vec::new();
        if !loopback {
            if let Some(path) = &config.token_file {
                tokens.push(credentials.token("the door's token", path)?);
            }
            tokens.extend(scrape.cloned());
            if tokens.is_empty() {
                return Err(WsSetupError::MetricsToken { addr: config.addr });
            }
        }
        if !loopback && config.tls.is_none() && !config.insecure_plaintext {
            return Err(WsSetupError::MetricsPlaintext { addr: config.addr });
        }
        let tls = config.tls.as_ref().map(|files| credentials.tls(files)).transpose()?;
        let bind_err = |source| WsSetupError::MetricsBind { addr: config.addr, source };
        let std_listener = std::net::TcpListener::bind(config.addr).map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = std_listener.local_addr().map_err(bind_err)?;
        let listener = TcpListener::from_std(std_listener).map_err(bind_err)?;
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        Ok(MetricsListener { listener, addr, tokens, tls, slots })
    }

    /// The address actually bound.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether scrapes must present the token.
    pub(crate) fn needs_token(&self) -> bool {
        !self.tokens.is_empty()
    }
}

/// Accept and answer metrics connections until the future is dropped (the daemon stops), or
/// never when there is no metrics address.
pub(crate) async fn serve(listener: Option<MetricsListener>, shared: Arc<Shared>) {
    let Some(listener) = listener else { return std::future::pending().await };
    let doorway = Doorway::metrics(shared, listener.tokens.clone());
    loop {
        let (stream, peer) = match listener.listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&listener.slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let doorway = doorway.clone();
        // The certificate in use now; a reload later does not touch this connection.
        let tls = listener.tls.as_ref().map(|tls| tls.get());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
            let tls =
                tokio::time::timeout_at(deadline, crate::tls::accept(stream, tls.as_deref(), peer));
            if let Ok(Some(stream)) = tls.await {
                // Never an upgrade here: the router answers every request itself.
                let _ = doorway.serve(stream, peer, deadline).await;
            }
            drop(slot);
        });
    }
}
