//! MCP over stdio with JSON-RPC's error codes for what rmcp would drop or misname: a line that
//! is not JSON gets `-32700` (parse error) and a `tools/call` whose `arguments` is not an object
//! gets `-32602` (invalid params). Everything else passes through to rmcp unchanged.
//!
//! A filter sits between the real stdin/stdout and rmcp's in-memory pipes: it reads whole lines,
//! answers the bad ones itself, and writes rmcp's answers and its own whole lines to stdout, so
//! the two never interleave inside a line.

use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufReader,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Longest line read from the client; a longer one is answered as a parse error and skipped.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// How often, and how many times, to look for a new parent after the input ended.
const ORPHAN_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
const ORPHAN_CHECKS: usize = 50;
/// Buffer of the in-memory pipes to rmcp.
const PIPE: usize = 256 * 1024;

/// JSON-RPC's "parse error" code.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid params" code.
const INVALID_PARAMS: i64 = -32602;

/// The pipes rmcp reads and writes, with the filter running between them and `input`/`output`.
/// `gone` fires when the input ends because the client died: this process has a new parent.
/// rmcp would otherwise wait for the calls in flight, to answer nobody; a client that only
/// closed its end of the input (a pipe of requests) still gets its answers.
pub(crate) fn filtered(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    gone: CancellationToken,
) -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
    let (to_rmcp, rmcp_in) = tokio::io::duplex(PIPE);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE);
    let (errors_tx, errors_rx) = mpsc::channel::<Vec<u8>>(64);
    let parent = std::os::unix::process::parent_id();
    tokio::spawn(async move {
        read_loop(input, to_rmcp, errors_tx).await;
        // A dying parent closes its files before it is gone: its pipe can end a little before
        // this process is handed to a new parent.
        for _ in 0..ORPHAN_CHECKS {
            if std::os::unix::process::parent_id() != parent {
                gone.cancel();
                return;
            }
            tokio::time::sleep(ORPHAN_CHECK_EVERY).await;
        }
    });
    tokio::spawn(write_loop(from_rmcp, errors_rx, output));
    (rmcp_in, rmcp_out)
}

/// What to do with one line from the client.
fn check(line: &[u8]) -> Result<(), Vec<u8>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Err(error_line(Value::Null, PARSE_ERROR, &format!("not JSON: {e}"))),
    };
    if value.get("method").and_then(Value::as_str) == Some("tools/call")
        && let Some(args) = value.get("params").and_then(|p| p.get("arguments"))
        && !args.is_object()
        && !args.is_null()
    {
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        return Err(error_line(
            id,
            INVALID_PARAMS,
            "tools/call: `arguments` must be an object of the tool's parameters",
        ));
    }
    Ok(())
}

fn error_line(id: Value, code: i64, message: &str) -> Vec<u8> {
    let answer = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut line = answer.to_string().into_bytes();
    line.push(b'\n');
    line
}

async fn read_loop(
    input: impl AsyncRead + Unpin,
    mut to_rmcp: tokio::io::DuplexStream,
    errors: mpsc::Sender<Vec<u8>>,
) {
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            let message = format!("the line is longer than {MAX_LINE} bytes; it was skipped");
            let _ = errors.send(error_line(Value::Null, PARSE_ERROR, &message)).await;
            if !skip_line(&mut reader).await {
                break;
            }
            continue;
        }
        match check(&line) {
            Ok(()) => {
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Err(answer) => {
                if errors.send(answer).await.is_err() {
                    break;
                }
            }
        }
    }
    // The client's end: rmcp sees end of input and stops.
    let _ = to_rmcp.shutdown().await;
}

/// Discards input up to and including the next newline, a buffer at a time (constant memory
/// however long the line); `false` when the input ended first.
async fn skip_line(reader: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    loop {
        let (used, done) = match reader.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            },
        };
        reader.consume(used);
        if done {
            return true;
        }
    }
}

async fn write_loop(
    from_rmcp: tokio::io::DuplexStream,
    mut errors: mpsc::Receiver<Vec<u8>>,
    mut output: impl AsyncWrite + Unpin,
) {
    let mut answers = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut errors_open = true;
    loop {
        tokio::select! {
            read = answers.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            break;
                        }
                        line.clear();
                    }
                }
            }
            error = errors.recv(), if errors_open => match error {
                Some(error) => {
                    if output.write_all(&error).await.is_err() || output.flush().await.is_err() {
                        break;
                    }
                }
                None => errors_open = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bad_lines_get_their_json_rpc_code() {
        let code = |line: &str| {
            check(line.as_bytes())
                .err()
                .map(|l| serde_json::from_slice::<Value>(&l).unwrap()["error"]["code"].clone())
        };
        assert_eq!(code("not json"), Some(json!(PARSE_ERROR)));
        assert_eq!(
            code(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":"s"}}"#
            ),
            Some(json!(INVALID_PARAMS))
        );
        assert_eq!(
            code(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{}}}"#
            ),
            None
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), None);
        assert_eq!(code(""), None);
    }

    #[tokio::test]
    async fn an_over_long_line_is_skipped_in_constant_memory() {
        // A line four times the limit, then a good one: the good one reaches rmcp whole, one
        // parse error is answered, and the reader never holds more than a buffer of the rest.
        let long = vec![b'x'; 4 * MAX_LINE];
        let mut input = long;
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        let (out_w, mut out_r) = tokio::io::duplex(1 << 16);
        let (mut rmcp_in, _rmcp_out) =
            filtered(std::io::Cursor::new(input), out_w, CancellationToken::new());
        let mut got = Vec::new();
        rmcp_in.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        let mut answer = vec![0u8; 4096];
        let n = out_r.read(&mut answer).await.unwrap();
        let v: Value = serde_json::from_slice(&answer[..n]).unwrap();
        assert_eq!(v["error"]["code"], json!(PARSE_ERROR), "{v}");
    }

    #[tokio::test]
    async fn skipping_reads_a_buffer_at_a_time() {
        let mut input = vec![b'y'; 1 << 20];
        input.extend_from_slice(b"\nnext");
        let mut reader = BufReader::with_capacity(4096, std::io::Cursor::new(input));
        assert!(skip_line(&mut reader).await);
        assert_eq!(reader.buffer().len().max(4096), 4096, "never more than its buffer");
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "next");
        assert!(!skip_line(&mut reader).await, "the input ended");
    }
}
