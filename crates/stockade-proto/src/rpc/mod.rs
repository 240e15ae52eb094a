//! The daemon's JSON-RPC 2.0 protocol: envelopes, error codes, and one `*Params`/`*Result` pair
//! per method, bound to the method's name in [`method`]. Framing is newline-delimited JSON: one
//! message per line, UTF-8, `\n`-terminated. `docs/protocol.md` documents every method for
//! people; this module is the source of truth.
//!
//! - [`method`]: the [`Method`] trait, one type per method, the list of every method name.
//! - `session`: the session methods' types (`run` … `resize`) and the `bytes_b64` codec.
//! - `daemon`: `stats`, `status`, `shutdown`.
//! - `schedule`: the `schedule.*` methods' types.

mod daemon;
pub mod method;
mod schedule;
mod session;

pub use daemon::{ShutdownResult, StatsResult, StatusResult, TrimStats};
pub use method::{METHODS, Method, MethodName};
pub use schedule::*;
pub use session::*;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version string every message carries.
pub const JSONRPC_VERSION: &str = "2.0";
/// Largest request line the daemon accepts (bytes, newline excluded).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Longest a `wait_ms`/`yield_ms` may ask to wait.
pub const MAX_WAIT_MS: u64 = 300_000;
/// Longest grace a request may ask for between the polite signal and `SIGKILL` (a `kill`, a
/// run's `grace_ms`); longer asks are cut to it.
pub const MAX_GRACE_MS: u64 = 60_000;

/// The parameters of a method that takes none: `{}` on the wire; unknown fields are refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// JSON-RPC error codes: the standard ones and Stockade's (-32000..-32099).
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object (or too large).
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Wrong or missing parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A bug or an unexpected OS error in the daemon.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No session with that id.
    pub const NO_SUCH_SESSION: i64 = -32001;
    /// A configured limit was reached (sessions, memory budget, disk budget).
    pub const LIMIT_REACHED: i64 = -32002;
    /// The command could not be started (bad cwd, no such shell, …).
    pub const SPAWN_FAILED: i64 = -32003;
    /// The session does not accept this (e.g. `write` without stdin, `resize` without a PTY).
    pub const NOT_SUPPORTED: i64 = -32004;
    /// A disk or state-directory problem.
    pub const STORAGE: i64 = -32005;
    /// The daemon is shutting down.
    pub const SHUTTING_DOWN: i64 = -32006;
    /// `write` did not get (all) its bytes to the command: it closed its input or exited, or did
    /// not read within the input timeout. `data.written` / `data.total` say how far it got.
    pub const INPUT_FAILED: i64 = -32007;
    /// No schedule with that name.
    pub const NO_SUCH_SCHEDULE: i64 = -32008;
    /// The command was started but the daemon ran short of a resource (threads, file
    /// descriptors) to supervise it; its processes were terminated. The request was valid.
    pub const RESOURCE: i64 = -32009;
}

/// A request (with an `id`) or a notification (without).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request id, echoed in the response; absent for a notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The parameters (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// A response: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request's id (`null` when it could not be read).
    pub id: Value,
    /// The result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// One sentence saying what went wrong and what to do.
    pub message: String,
    /// Optional details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RpcError {}

impl Response {
    /// A success response.
    pub fn ok(id: Value, result: Value) -> Response {
        Response { jsonrpc: JSONRPC_VERSION.into(), id, result: Some(result), error: None }
    }

    /// An error response.
    pub fn err(id: Value, code: i64, message: impl Into<String>) -> Response {
        Response {
            jsonrpc: JSONRPC_VERSION.into(),
            id,
            result: None,
            error: Some(RpcError { code, message: message.into(), data: None }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_params_reject_unknown_fields() {
        let bad = serde_json::json!({"command": "true", "bogus": 1});
        assert!(serde_json::from_value::<RunParams>(bad).is_err());
        let ok: RunParams = serde_json::from_value(serde_json::json!({"command": "true"})).unwrap();
        assert_eq!(ok.command, "true");
    }

    #[test]
    fn responses_carry_exactly_one_of_result_and_error() {
        let ok = serde_json::to_value(Response::ok(1.into(), serde_json::json!({}))).unwrap();
        assert!(ok.get("error").is_none());
        let err = serde_json::to_value(Response::err(Value::Null, code::PARSE_ERROR, "x")).unwrap();
        assert!(err.get("result").is_none());
        assert_eq!(err["error"]["code"], -32700);
    }
}
