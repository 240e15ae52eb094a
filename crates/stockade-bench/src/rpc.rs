//! A tiny blocking JSON-RPC 2.0 client for the daemon's socket: write one JSON line, read one
//! line. The bench measures the daemon from outside, like any client; it needs nothing more.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stockade_proto::rpc::{JSONRPC_VERSION, Request, Response};

use crate::{BenchError, Result};

/// How long one call may take before the harness gives up on the daemon.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One connection to the daemon.
pub struct RpcClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    line: String,
}

impl RpcClient {
    /// Connect to the daemon's socket.
    pub fn connect(socket: &Path) -> Result<RpcClient> {
        let stream =
            UnixStream::connect(socket).map_err(|e| BenchError::path("connect to", socket, e))?;
        stream
            .set_read_timeout(Some(CALL_TIMEOUT))
            .map_err(|e| BenchError::io("set a socket timeout", e))?;
        let writer = stream.try_clone().map_err(|e| BenchError::io("clone the socket", e))?;
        Ok(RpcClient { reader: BufReader::new(stream), writer, next_id: 1, line: String::new() })
    }

    /// Call `method` and return its raw result.
    pub fn call_value(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let req = Request {
            jsonrpc: JSONRPC_VERSION.into(),
            id: Some(id.into()),
            method: method.into(),
            params: Some(params),
        };
        let mut bytes = serde_json::to_vec(&req)?;
        bytes.push(b'\n');
        self.writer
            .write_all(&bytes)
            .map_err(|e| BenchError::io(format!("send `{method}` to the daemon"), e))?;
        // Skip notifications (no id) until our answer arrives.
        loop {
            self.line.clear();
            let n = self
                .reader
                .read_line(&mut self.line)
                .map_err(|e| BenchError::io(format!("read the answer to `{method}`"), e))?;
            if n == 0 {
                return Err(BenchError::Rpc(format!("closed the connection during `{method}`")));
            }
            let resp: Response = match serde_json::from_str(self.line.trim_end()) {
                Ok(r) => r,
                Err(_) => continue,
            };
            if resp.id != id {
                continue;
            }
            if let Some(err) = resp.error {
                return Err(BenchError::Rpc(format!("`{method}` failed: {}", err.message)));
            }
            return Ok(resp.result.unwrap_or(Value::Null));
        }
    }

    /// Call `method` with typed params and a typed result.
    pub fn call<P: Serialize, R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: &P,
    ) -> Result<R> {
        let v = self.call_value(method, serde_json::to_value(params)?)?;
        serde_json::from_value(v)
            .map_err(|e| BenchError::Rpc(format!("unexpected answer to `{method}`: {e}")))
    }
}
