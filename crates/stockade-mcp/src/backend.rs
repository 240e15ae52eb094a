//! How the MCP server reaches the daemon: one short blocking connection per tool call, made on
//! tokio's blocking pool so a long poll never stalls the transport.
//!
//! A fresh connection per call keeps calls independent (a timed-out call poisons only its own
//! connection) and lets several tool calls run at once; a Unix-socket connect costs microseconds.

use std::sync::Arc;

use stockade_client::{Client, ClientError, ConnectOptions};

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
        let opts = Arc::clone(&self.opts);
        let joined = tokio::task::spawn_blocking(move || {
            let mut client = Client::connect(&opts)?;
            f(&mut client)
        })
        .await;
        match joined {
            Ok(result) => result.map_err(ToolError::from),
            Err(e) => Err(ToolError::Internal(format!("the daemon call did not finish: {e}"))),
        }
    }
}
