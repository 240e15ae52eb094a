//! Errors: why a tool call failed (shown to the model as an `isError` result with a sentence it
//! can act on) and why the server could not start or serve.

use std::net::SocketAddr;

use stockade_client::ClientError;
use stockade_proto::rpc::code;

/// Why a tool call failed. Every variant displays as one sentence that says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for {tool}: {detail}. Fix them and call {tool} again.")]
    BadArguments {
        /// The tool.
        tool: String,
        /// What serde said.
        detail: String,
    },
    /// The daemon answered with an error.
    #[error("{}", daemon_sentence(.code, .message))]
    Daemon {
        /// The JSON-RPC code (`stockade_proto::rpc::code`).
        code: i64,
        /// The daemon's sentence.
        message: String,
    },
    /// The daemon could not be reached or did not answer properly.
    #[error("the Stockade daemon is not available: {0}")]
    Unavailable(String),
    /// The request went out and no answer came back (none in time, or the connection closed
    /// or broke): the call may have taken effect.
    #[error("the Stockade daemon is not available: {0}")]
    Lost(String),
    /// A keyed call that may have taken effect, and how its key finds out.
    #[error("{}. {what_now}", .lost.trim_end_matches('.'))]
    MayHaveTakenEffect {
        /// Why no answer came (the [`ToolError::Lost`] sentence).
        lost: String,
        /// What may have happened and the call that finds out, naming the key.
        what_now: String,
    },
    /// The client cancelled the call (`notifications/cancelled`): the wait stopped, the
    /// session goes on.
    #[error("the call was cancelled; the session keeps running (see it with read_output).")]
    Cancelled,
    /// An `exec_command` the client cancelled (or gave up on), and the session it started.
    #[error(
        "the call was cancelled before its answer; its command keeps running as {0}: read_output session_id={0} shows its output (yield_time_ms waits for more), kill_session session_id={0} stops it."
    )]
    CancelledRun(String),
    /// Something unexpected inside the MCP server.
    #[error("internal error in the Stockade MCP server: {0}")]
    Internal(String),
}

impl From<ClientError> for ToolError {
    fn from(e: ClientError) -> ToolError {
        match e {
            ClientError::Rpc { code, message, .. } => ToolError::Daemon { code, message },
            other if other.may_have_taken_effect() => ToolError::Lost(other.to_string()),
            other => ToolError::Unavailable(other.to_string()),
        }
    }
}

impl ToolError {
    /// A keyed call's error: one that may have taken effect adds `what_now` (what may have
    /// happened and how its key finds out); any other is as it was.
    pub fn name_the_key(self, what_now: impl FnOnce() -> String) -> ToolError {
        match self {
            ToolError::Lost(why) => ToolError::MayHaveTakenEffect {
                lost: ToolError::Lost(why).to_string(),
                what_now: what_now(),
            },
            other => other,
        }
    }

    /// The daemon's JSON-RPC code, when the daemon answered with an error.
    pub fn code(&self) -> Option<i64> {
        match self {
            ToolError::Daemon { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The daemon's sentence plus what the model can do about it.
fn daemon_sentence(code: &i64, message: &str) -> String {
    let message = message.trim_end_matches('.');
    let hint = match *code {
        code::NO_SUCH_SESSION => {
            "Call list_sessions to see the sessions that exist (ids look like sh-3)."
        }
        code::LIMIT_REACHED => {
            "Stop sessions you no longer need with kill_session, then try again."
        }
        code::SPAWN_FAILED => "Check cmd, workdir and shell, then try again.",
        code::INVALID_PARAMS => "Fix the arguments and call again.",
        code::RESOURCE => "The machine is short of resources; try again in a moment.",
        code::SHUTTING_DOWN => "The daemon is stopping; call again in a moment to start a new one.",
        _ => "",
    };
    if hint.is_empty() { format!("{message}.") } else { format!("{message}. {hint}") }
}

/// Why `stockade mcp` could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The bearer token cannot guard the HTTP door.
    #[error("the MCP token cannot be used: {problem}")]
    BadToken {
        /// What is wrong and what to do.
        #[source]
        problem: stockade_proto::token::TokenFileError,
    },
    /// Binding the HTTP listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate or key cannot be used.
    #[error("{0}")]
    Tls(#[from] stockade_daemon::WsSetupError),
    /// The embedded daemon could not start.
    #[error("cannot start the embedded daemon: {0}")]
    Embedded(#[from] stockade_daemon::DaemonError),
    /// The MCP transport failed.
    #[error("MCP transport error: {0}")]
    Transport(String),
    /// The daemon could not be told to hide this server's secrets from sandboxed commands.
    #[error(
        "the daemon could not be asked to hide this server's token file and TLS key from sandboxed commands ({reason}), so the server does not start: a sandboxed command could read the token; start it where the daemon can be reached, outside any sandbox"
    )]
    HideSecrets {
        /// Why the call failed.
        reason: String,
    },
    /// Another I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
