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

use tokio::net::TcpListener;

use crate::admission::Admission;
use crate::config::MetricsConfig;
use crate::error::WsSetupError;
use crate::gate::{DoorTls, HEAD_DEADLINE, look_in};
use crate::http::Doorway;
use crate::reload::{Credentials, LiveTls, LiveToken};
use crate::state::Shared;

/// A bound metrics listener.
pub(crate) struct MetricsListener {
    listener: TcpListener,
    addr: SocketAddr,
    /// The tokens a scrape may present; none: no token is asked (loopback).
    tokens: Vec<LiveToken>,
    tls: Option<LiveTls>,
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
        let listener = crate::gate::bind(config.addr).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(MetricsListener { listener, addr, tokens, tls })
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
/// never when there is no metrics address. Each connection passes the daemon's one admission
/// gate (`gate`, `admission`): a pending place taken before it is accepted, the head deadline,
/// and room made by dropping silent or trickling ones, so a flood here holds no more sockets
/// than one at the WebSocket door and cannot keep a scraper out.
pub(crate) async fn serve(
    listener: Option<MetricsListener>,
    shared: Arc<Shared>,
    admission: Arc<Admission>,
) {
    let Some(listener) = listener else { return std::future::pending().await };
    let doorway = Doorway::metrics(shared, listener.tokens.clone());
    let tls = listener.tls.clone().map_or(DoorTls::Plain, DoorTls::Live);
    loop {
        let (stream, peer, pending) =
            match crate::gate::accept(&listener.listener, &admission).await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
        let (doorway, tls) = (doorway.clone(), tls.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + HEAD_DEADLINE;
            let Some(stream) = look_in(stream, peer, &pending, &tls, deadline).await else {
                return;
            };
            // Never an upgrade here: the router answers every request itself.
            tokio::select! {
                _ = doorway.serve(stream, peer, deadline) => {}
                () = pending.cancel.cancelled() => {}
            }
            drop(pending);
        });
        // Its task looks at it before the next is accepted (see `crate::admission`).
        tokio::task::yield_now().await;
    }
}
