//! Binary reads (`read` with `raw: true, encoding: "binary"`), the real binary: 64 MiB of
//! random bytes (NULs and invalid UTF-8 throughout) read back byte for byte by cursor in pieces
//! of an odd size, over the Unix socket of a daemon the CLI auto-started and over a TLS door on
//! loopback; the wire layout (the answer's line, exactly `binary_len` bytes, the next line); the
//! JSON form still answering old clients on the same connection; a client that meets a daemon
//! refusing the new param (an older one, played by a proxy) falling back to base64; and
//! `logs --raw` byte-exact both ways.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_client::{Client, ConnectOptions, NO_BINARY_READ_ENV, RemoteOptions, raw_bytes};
use stockade_proto::rpc::{ReadEncoding, ReadParams, method};
use stockade_testkit::child::wait_bounded;
use stockade_testkit::home::Home;
use stockade_testkit::{DaemonProc, owner_token_file};

use crate::remote_support::Ca;

/// Bytes the session prints.
const SIZE: usize = 64 << 20;
/// An odd piece size, so cursors fall anywhere (not on a power of two).
const PIECE: usize = 5_000_003;
/// How long a CLI copy of the log may take (a loaded machine; it takes about a second).
const COPY_LIMIT: Duration = Duration::from_secs(120);

/// `SIZE` pseudo-random bytes (xorshift: every byte value, NULs and invalid UTF-8 included),
/// written to `dir/data.bin`.
fn random_file(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = Vec::with_capacity(SIZE);
    while data.len() < SIZE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(SIZE);
    assert!(data.contains(&0) && std::str::from_utf8(&data).is_err());
    let path = dir.join("data.bin");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

/// Runs `cmd` (a CLI copy) to the end within [`COPY_LIMIT`]; its exact stdout.
fn copy_out(cmd: &mut Command, dir: &Path) -> Vec<u8> {
    let path = dir.join("copy.out");
    cmd.stdout(std::fs::File::create(&path).unwrap()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let status = wait_bounded(&mut child, COPY_LIMIT);
    let mut stderr = String::new();
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut stderr));
    let status = status.unwrap_or_else(|| panic!("{cmd:?} took over {COPY_LIMIT:?}: {stderr}"));
    assert!(status.success(), "{cmd:?}: {status:?}: {stderr}");
    std::fs::read(&path).unwrap()
}

/// A finished session of `home`'s daemon (auto-started by the CLI) that printed `file`.
fn session_of(home: &Home, file: &Path) -> String {
    let started = home.run_bg(&format!("cat {}", file.display()));
    let id = started["id"].as_str().unwrap().to_owned();
    let done = home.wait_finished(&id);
    assert_eq!(done["state"], "exited", "{done}");
    id
}

/// Every byte of session `id` through `client.read_bytes`, `PIECE` at a time; checks that each
/// answer announced its bytes and that cursors advance by exactly that many.
fn read_all(client: &mut Client, id: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut cursor = 0u64;
    loop {
        let params = ReadParams {
            id: id.to_owned(),
            after: Some(cursor),
            max_bytes: Some(PIECE),
            ..ReadParams::default()
        };
        let (answer, bytes) = client.read_bytes(params).unwrap();
        assert_eq!(answer.view.start_cursor, cursor);
        assert_eq!(answer.view.next_cursor, cursor + bytes.len() as u64);
        got.extend_from_slice(&bytes);
        cursor = answer.view.next_cursor;
        if bytes.is_empty() && cursor == answer.view.total_bytes {
            return got;
        }
        assert!(got.len() <= SIZE, "more bytes than the session printed");
    }
}

fn local(home: &Home) -> Client {
    let opts = ConnectOptions { autostart: false, ..ConnectOptions::new(home.path()) };
    Client::connect(&opts).unwrap()
}

#[test]
fn binary_reads_on_the_unix_socket_are_byte_exact_and_json_reads_still_work() {
    let home = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let (file, data) = random_file(tmp.path());
    let id = session_of(&home, &file);
    let mut client = local(&home);
    assert!(read_all(&mut client, &id) == data, "the binary reads differ from what was printed");

    // The JSON form, on the same connection after the binary answers: the stream is in step.
    let at = 12_345_677u64;
    let old = client
        .call::<method::Read>(ReadParams {
            id: id.clone(),
            after: Some(at),
            raw: true,
            max_bytes: Some(PIECE),
            ..ReadParams::default()
        })
        .unwrap();
    assert_eq!(old.binary_len, None);
    let bytes = raw_bytes(&old).unwrap().unwrap();
    assert_eq!(bytes.len(), 4 << 20, "a base64 answer holds at most 4 MiB");
    assert!(bytes[..] == data[at as usize..at as usize + bytes.len()]);

    // `encoding` without `raw` is refused in a sentence.
    let err = client
        .call::<method::Read>(ReadParams {
            id: id.clone(),
            encoding: Some(ReadEncoding::Binary),
            ..ReadParams::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("add raw: true"), "{err}");

    // The layout on the wire: the answer's line, exactly `binary_len` bytes, the next line.
    let socket = home.path().join("stockade.sock");
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let ask = json!({"jsonrpc": "2.0", "id": 1, "method": "read",
        "params": {"id": id, "after": 7, "raw": true, "encoding": "binary", "max_bytes": 1000}});
    writeln!(stream, "{ask}").unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["result"]["binary_len"], 1000, "{answer}");
    assert_eq!(answer["result"]["next_cursor"], 1007, "{answer}");
    assert!(answer["result"].get("bytes_b64").is_none(), "{answer}");
    let mut bytes = vec![0u8; 1000];
    reader.read_exact(&mut bytes).unwrap();
    assert!(bytes[..] == data[7..1007]);
    writeln!(stream, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "status"})).unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    let status: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(status["id"], 2, "the next line starts right after the bytes: {line}");
}

#[test]
fn logs_raw_is_byte_exact_with_binary_reads_and_without() {
    let home = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let (file, data) = random_file(tmp.path());
    let id = session_of(&home, &file);
    for env in [None, Some("1")] {
        let mut logs = home.cmd(&["logs", "--raw", &id]);
        if let Some(v) = env {
            logs.env(NO_BINARY_READ_ENV, v);
        } else {
            logs.env_remove(NO_BINARY_READ_ENV);
        }
        let out = copy_out(&mut logs, tmp.path());
        assert!(out == data, "logs --raw ({env:?}) differs: {} bytes", out.len());
    }
}

/// Plays a daemon that predates binary reads: relays every line to the real daemon's socket,
/// except a request with an `encoding` param, which it refuses the way such a daemon does.
/// Serves one connection; returns how many requests it refused.
fn old_daemon(listener: UnixListener, real: PathBuf) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let mut to_client = client.try_clone().unwrap();
        let upstream = UnixStream::connect(&real).unwrap();
        let mut to_daemon = upstream.try_clone().unwrap();
        let mut from_daemon = BufReader::new(upstream);
        let mut refused = 0;
        for line in BufReader::new(client).lines() {
            let Ok(line) = line else { break };
            let request: Value = serde_json::from_str(&line).unwrap();
            if request["params"].get("encoding").is_some() {
                refused += 1;
                let answer = json!({"jsonrpc": "2.0", "id": request["id"], "error": {
                    "code": -32602,
                    "message": "invalid params: unknown field `encoding`, expected one of `id`, `after`, `max_bytes`, `max_lines`, `mode`, `stream`, `wait_ms`, `collect`, `until`, `raw`, `render`"}});
                writeln!(to_client, "{answer}").unwrap();
                continue;
            }
            writeln!(to_daemon, "{line}").unwrap();
            let mut answer = String::new();
            from_daemon.read_line(&mut answer).unwrap();
            to_client.write_all(answer.as_bytes()).unwrap();
        }
        refused
    })
}

#[test]
fn a_client_falls_back_to_base64_when_the_daemon_does_not_know_binary_reads() {
    let home = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let (file, data) = random_file(tmp.path());
    let id = session_of(&home, &file);
    let old = tmp.path().join("old.sock");
    let proxy = old_daemon(UnixListener::bind(&old).unwrap(), home.path().join("stockade.sock"));
    let opts =
        ConnectOptions { socket: Some(old), autostart: false, ..ConnectOptions::new(home.path()) };
    let mut client = Client::connect(&opts).unwrap();
    assert!(read_all(&mut client, &id) == data, "the fallback reads differ from what was printed");
    drop(client);
    assert_eq!(proxy.join().unwrap(), 1, "binary asked once, then base64 for the connection");
}

const TOKEN: &str = "bulk-read-test-token-7d2e";

#[test]
fn binary_reads_over_a_tls_door_are_byte_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let tls = tmp.path().join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    ca.issue("127.0.0.1", &tls);
    let token = owner_token_file(tmp.path(), TOKEN);
    let arg = |p: &Path| p.to_str().unwrap().to_owned();
    let (cert, key, token_arg) =
        (arg(&tls.join("cert.pem")), arg(&tls.join("key.pem")), arg(&token));
    let door =
        ["--ws", "127.0.0.1:0", "--token-file", &token_arg, "--tls-cert", &cert, "--tls-key", &key];
    let daemon = DaemonProc::start(&door);
    let (file, data) = random_file(tmp.path());
    let mut rpc = daemon.client();
    let run = rpc.ok("run", json!({"command": format!("cat {}", file.display())}));
    assert_eq!(run["state"], "exited", "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let ready = daemon.stderr.lock().unwrap().clone();
    let addr = ready.split("wss://").nth(1).and_then(|r| r.split_whitespace().next());
    let url = format!("wss://{}", addr.unwrap_or_else(|| panic!("no wss:// door in {ready}")));
    let remote = RemoteOptions { ca_file: Some(ca.pem()), ..RemoteOptions::new(&url, &token) };
    let opts = ConnectOptions { remote: Some(remote), ..ConnectOptions::new(&daemon.home) };
    let mut client = Client::connect(&opts).unwrap();
    assert!(read_all(&mut client, &id) == data, "the door's binary reads differ");
    // The JSON form on the same connection after the binary messages.
    let old = client
        .call::<method::Read>(ReadParams {
            id: id.clone(),
            after: Some(3),
            raw: true,
            max_bytes: Some(999),
            ..ReadParams::default()
        })
        .unwrap();
    assert!(raw_bytes(&old).unwrap().unwrap()[..] == data[3..1002]);
    drop(client);

    // `logs --raw` through the door, as a remote user runs it.
    let cli = Home::new();
    let ca_arg = arg(&ca.pem());
    let mut logs = cli.cmd(&["--remote", &url, "--token-file", &token_arg, "--ca-file", &ca_arg]);
    logs.args(["logs", "--raw", &id]);
    let out = copy_out(&mut logs, tmp.path());
    assert!(out == data, "logs --raw over wss differs: {} bytes", out.len());
}
