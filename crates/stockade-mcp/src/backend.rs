//! How the MCP server reaches the daemon: one short blocking connection per tool call, made on
//! tokio's blocking pool so a long poll never stalls the transport.
//!
//! A fresh connection per call keeps calls independent (a timed-out call poisons only its own
//! connection) and lets several tool calls run at once; a Unix-socket connect costs microseconds.
//! It also makes a cancelled call cheap to stop: closing its connection ends the daemon's wait.

use std::sync::{Arc, Mutex};

use stockade_client::{Client, ClientError, ConnectOptions, Interrupter};
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;

/// The daemon behind the tools.
#[derive(Debug, Clone)]
pub struct Backend {
    opts: Arc<ConnectOptions>,
}

impl Backend {
    /// A backend connecting with `opts` (auto-starting the daemon if they say so).
    pub fn new(opts: ConnectOptions) -> Backend {
        Backend { opts: Arc::new(opts) }
    }

    /// The options used to connect.
    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    /// Connect and run `f` with the client on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, ClientError> + Send + 'static,
    {
        self.call_until(&CancellationToken::new(), f).await
    }

    /// Like [`call`](Backend::call), stopped when `cancel` fires: the connection is shut, so
    /// the daemon stops waiting for this call (the session goes on), and the answer is
    /// [`ToolError::Cancelled`].
    pub async fn call_until<T, F>(&self, cancel: &CancellationToken, f: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, ClientError> + Send + 'static,
    {
        let opts = Arc::clone(&self.opts);
        let slot: Arc<Mutex<Option<Interrupter>>> = Arc::new(Mutex::new(None));
        let (slot2, cancel2) = (Arc::clone(&slot), cancel.clone());
        let mut task = tokio::task::spawn_blocking(move || {
            let mut client = Client::connect(&opts)?;
            if let (Ok(i), Ok(mut s)) = (client.interrupter(), slot2.lock()) {
                *s = Some(i);
            }
            if cancel2.is_cancelled() {
                return Err(ClientError::Poisoned);
            }
            f(&mut client)
        });
        let joined = tokio::select! {
            joined = &mut task => joined,
            () = cancel.cancelled() => {
                if let Some(i) = slot.lock().ok().and_then(|mut s| s.take()) {
                    i.interrupt();
                }
                return Err(ToolError::Cancelled);
            }
        };
        match joined {
            Ok(result) => result.map_err(ToolError::from),
            Err(e) => Err(ToolError::Internal(format!("the daemon call did not finish: {e}"))),
        }
    }
}
