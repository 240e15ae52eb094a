//! A network door served outside this crate (the E2B door, `daemon run --e2b`), set up by the
//! daemon as its own listeners are: its token file read under the same rules and reloaded with
//! the other credentials (`reload`: a changed file or SIGHUP), its certificate and key the same
//! way, both hidden from sandboxed commands, and its connections handed over through the
//! daemon's one TLS acceptor behind its one admission gate (`gate`): a connection is pending
//! (a few places, a head deadline, silent and trickling ones dropped to make room) until a
//! request head carries the token, then holds a slot of the budget the WebSocket door takes too,
//! so a flood cannot take the descriptors the Unix socket's clients need nor keep a token
//! holder out.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::admission::Admission;
use crate::config::E2bConfig;
use crate::error::WsSetupError;
use crate::gate::{Authenticates, DoorTls, GatedDoor};
use crate::hall::Hall;
use crate::reload::{Credentials, LiveTls, LiveToken};

/// The E2B door's listener, bound by the daemon, served by the door's own router.
pub struct OuterDoor {
    listener: TcpListener,
    addr: SocketAddr,
    key: DoorKey,
    tls: Option<LiveTls>,
    hall: Hall,
    admission: Arc<Admission>,
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
    pub(crate) fn from_live(token: LiveToken) -> DoorKey {
        DoorKey(token)
    }

    /// A token given on the command line rather than in a file (never reloaded), under the
    /// same rules as a token file's content.
    pub fn fixed(token: &str) -> Result<DoorKey, stockade_proto::token::TokenFileError> {
        crate::token::WsToken::given(token).map(|t| DoorKey(Arc::new(crate::reload::Live::new(t))))
    }

    /// Whether a request with these headers carries `Authorization: Bearer <token>` with the
    /// token in force now (any case of the scheme; constant time in the token).
    pub fn authorizes(&self, headers: &axum::http::HeaderMap) -> bool {
        self.0.authorizes(headers)
    }

    /// The fingerprint of the token (for the audit log) when `presented` is the one in force now,
    /// compared in constant time; `None` otherwise.
    pub fn check(&self, presented: &[u8]) -> Option<String> {
        let token = self.0.get();
        token.presented(presented).then(|| token.id())
    }

    /// The fingerprint of the token in force now when `accepts` accepts it: for a credential
    /// derived from the token (envd's signed file URLs: a hash of the request and the token),
    /// which `accepts` must compare in constant time.
    pub fn check_derived(&self, accepts: impl FnOnce(&[u8]) -> bool) -> Option<String> {
        let token = self.0.get();
        accepts(token.secret()).then(|| token.id())
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
    let listener = crate::gate::bind(config.addr).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    Ok((listener, addr, DoorKey(token), tls))
}

impl OuterDoor {
    pub(crate) fn new(
        (listener, addr, key, tls): (TcpListener, SocketAddr, DoorKey, Option<LiveTls>),
        hall: Hall,
        admission: &Arc<Admission>,
    ) -> OuterDoor {
        OuterDoor { listener, addr, key, tls, hall, admission: Arc::clone(admission) }
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

    /// Serve `router` on the door until `stop` is cancelled, behind the daemon's one admission
    /// gate (`gate`): the pending places and budget the WebSocket and metrics doors take too,
    /// the head deadline, and TLS with the certificate in force when each handshake starts. A
    /// connection is in once a request head satisfies `authenticates` (the door's token); until
    /// then it is pending. Requests carry `ConnectInfo<SocketAddr>`.
    pub async fn serve(
        self,
        router: axum::Router,
        authenticates: Authenticates,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let tls = self.tls.map_or(DoorTls::Plain, DoorTls::Live);
        GatedDoor::with(self.listener, tls, self.admission)
            .serve(router, authenticates, stop)
            .await;
    }
}
