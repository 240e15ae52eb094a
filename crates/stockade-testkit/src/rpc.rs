//! A raw JSON-RPC 2.0 client over the daemon's Unix socket: one line out, one line in. Raw on
//! purpose: tests send malformed bytes, half-close the connection and read answers out of order,
//! which a typed client (`stockade-client`) rightly cannot.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One connection to a daemon.
pub struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    /// Connects to `path`, retrying for a while (a daemon may still be binding).
    pub fn connect(path: &Path) -> Rpc {
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("cannot connect to {}: {e}", path.display()),
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let reader = BufReader::with_capacity(1 << 20, stream.try_clone().unwrap());
        Rpc { writer: stream, reader, next_id: 1 }
    }

    /// Writes `bytes` as they are (malformed requests included).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Sends a request with the next id; returns the id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&line).unwrap();
        bytes.push(b'\n');
        self.send_raw(&bytes);
        id
    }

    /// The next answer line, parsed.
    pub fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("an answer line");
        assert!(n > 0, "the daemon closed the connection");
        serde_json::from_str(&line).expect("the answer is JSON")
    }

    /// Calls and returns `Ok(result)` or `Err((code, message))`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        let id = self.send(method, params);
        let resp = self.recv();
        assert_eq!(resp["jsonrpc"], "2.0");
        assert_eq!(resp["id"], json!(id), "answer to the right request: {resp}");
        outcome(resp)
    }

    /// Calls and insists on success.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()) {
            Ok(v) => v,
            Err(e) => panic!("{method} {params} failed: {e:?}"),
        }
    }

    /// Every byte of a session's log, raw, in reads of at most `chunk` bytes; with the last
    /// (empty) answer, whose `total_bytes` says how long the log is.
    pub fn read_all_raw(&mut self, id: &str, chunk: u64) -> (Vec<u8>, Value) {
        let mut out = Vec::new();
        loop {
            let r = self.ok(
                "read",
                serde_json::json!({"id": id, "after": out.len(), "raw": true, "max_bytes": chunk}),
            );
            let bytes = crate::base64_decode(r["bytes_b64"].as_str().unwrap_or_default());
            if bytes.is_empty() {
                return (out, r);
            }
            out.extend_from_slice(&bytes);
        }
    }

    /// Half-closes the connection (no more requests; answers still come).
    pub fn shutdown_writes(&self) {
        let _ = self.writer.shutdown(std::net::Shutdown::Write);
    }
}

/// An answer as `Ok(result)` or `Err((code, message))`, checking it has exactly one of them and
/// that an error carries a sentence.
pub fn outcome(resp: Value) -> Result<Value, (i64, String)> {
    if let Some(err) = resp.get("error") {
        assert!(resp.get("result").is_none(), "exactly one of result and error: {resp}");
        let message = err["message"].as_str().unwrap_or_default().to_owned();
        assert!(!message.is_empty(), "errors carry a sentence: {resp}");
        return Err((err["code"].as_i64().unwrap(), message));
    }
    Ok(resp["result"].clone())
}
