//! The daemon's WebSocket door as a client sees it: the upgrade through `tungstenite`'s client
//! (with or without an `Authorization` header) and JSON-RPC over text messages.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest as _;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

use crate::rpc::outcome;

/// The WebSocket library the helpers speak, for tests that send frames of their own.
pub use tungstenite;

/// A client WebSocket over plain TCP.
pub type Ws = WebSocket<TcpStream>;

/// Opens a WebSocket to `addr` with this `Authorization` header (or none). A refused upgrade is
/// `Err(tungstenite::Error::Http(response))`.
pub fn connect(addr: SocketAddr, authorization: Option<&str>) -> Result<Ws, tungstenite::Error> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut request = format!("ws://{addr}/").into_client_request().unwrap();
    if let Some(value) = authorization {
        request.headers_mut().insert("authorization", value.parse().unwrap());
    }
    match tungstenite::client(request, stream) {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(e)) => Err(e),
        Err(tungstenite::HandshakeError::Interrupted(_)) => panic!("a blocking handshake"),
    }
}

/// The status of a refused upgrade (panics if it was accepted or failed otherwise).
pub fn refused_status(addr: SocketAddr, authorization: Option<&str>) -> u16 {
    match connect(addr, authorization) {
        Ok(_) => panic!("upgrade accepted with {authorization:?}"),
        Err(tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("expected an HTTP refusal for {authorization:?}, got {e}"),
    }
}

/// A JSON-RPC client over one WebSocket; `.0` is the socket for raw messages.
pub struct WsRpc(pub Ws);

impl WsRpc {
    /// Sends a request with this id.
    pub fn send(&mut self, id: u64, method: &str, params: Value) {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.0.send(Message::text(request.to_string())).unwrap();
    }

    /// The next answer (a text message; pings and pongs are skipped).
    pub fn recv(&mut self) -> Value {
        loop {
            match self.0.read().expect("an answer") {
                Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("expected a text answer, got {other:?}"),
            }
        }
    }

    /// Calls and returns `Ok(result)` or `Err((code, message))`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        self.send(7, method, params);
        let resp = self.recv();
        assert_eq!(resp["jsonrpc"], "2.0");
        assert_eq!(resp["id"], 7, "{resp}");
        outcome(resp)
    }

    /// Sends `request` as one text message, as it is; the next answer.
    pub fn request(&mut self, request: &str) -> Value {
        self.0.send(Message::text(request)).unwrap();
        self.recv()
    }

    /// Calls and insists on success.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params.clone()).unwrap_or_else(|e| panic!("{method} {params}: {e:?}"))
    }

    /// Reads until the daemon's close frame; its code.
    pub fn close_code(&mut self) -> CloseCode {
        loop {
            match self.0.read() {
                Ok(Message::Close(Some(frame))) => return frame.code,
                Ok(Message::Close(None)) => panic!("a close frame without a code"),
                Ok(_) => {}
                Err(e) => panic!("the connection ended without a close frame: {e}"),
            }
        }
    }
}
