//! The client against a tiny fake daemon in a thread: framing, typed results, typed errors,
//! deadlines, and what connect says when nothing listens.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_client::{Client, ClientError, ConnectOptions};
use stockade_proto::rpc::{NoParams, Request, Response, code, method};

/// Serve one connection: each request line goes to `answer`; `None` means "never answer".
fn fake_daemon(
    home: &Path,
    answer: impl Fn(&Request) -> Option<Response> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(home.join(stockade_client::SOCKET_FILE)).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            let request: Request = serde_json::from_str(&line).unwrap();
            match answer(&request) {
                Some(response) => {
                    let mut text = serde_json::to_string(&response).unwrap();
                    text.push('\n');
                    if writer.write_all(text.as_bytes()).is_err() {
                        return;
                    }
                }
                None => std::thread::sleep(Duration::from_secs(5)),
            }
        }
    })
}

fn status_json(home: &Path) -> Value {
    json!({
        "pid": 4242, "socket": home.join("stockade.sock"), "home": home,
        "version": "0.1.0", "containment": "process-group", "sessions": 3
    })
}

#[test]
fn calls_get_typed_results_and_typed_errors() {
    let home = tempfile::tempdir().unwrap();
    let status = status_json(home.path());
    let server = fake_daemon(home.path(), move |req| {
        let id = req.id.clone().unwrap();
        assert_eq!(req.jsonrpc, "2.0");
        Some(match req.method.as_str() {
            "status" => Response::ok(id, status.clone()),
            "kill" => {
                assert_eq!(req.params.as_ref().unwrap()["id"], "sh-9");
                Response::err(id, code::NO_SUCH_SESSION, "no session sh-9")
            }
            _ => Response::err(id, code::METHOD_NOT_FOUND, "no such method"),
        })
    });
    let mut opts = ConnectOptions::new(home.path());
    opts.autostart = false;
    let mut client = Client::connect(&opts).unwrap();
    assert!(!client.started_daemon());
    let status = client.call::<method::Status>(NoParams {}).unwrap();
    assert_eq!(status.pid, 4242);
    assert_eq!(status.sessions, 3);

    let err = client
        .call::<method::Kill>(stockade_proto::rpc::KillParams {
            id: "sh-9".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.is_no_such_session(), "{err:?}");
    assert_eq!(err.to_string(), "no session sh-9");
    // An error answer leaves the connection usable.
    assert_eq!(client.call::<method::Status>(NoParams {}).unwrap().pid, 4242);
    drop(client);
    server.join().unwrap();
}

#[test]
fn an_answer_that_never_comes_is_a_timeout_and_the_connection_is_then_refused() {
    let home = tempfile::tempdir().unwrap();
    let _server = fake_daemon(home.path(), |_| None);
    let mut opts = ConnectOptions::new(home.path());
    opts.call_timeout = Duration::from_millis(200);
    let mut client = Client::connect(&opts).unwrap();
    let err = client.call::<method::Status>(NoParams {}).unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(matches!(
        client.call::<method::Status>(NoParams {}).unwrap_err(),
        ClientError::Poisoned
    ));
}

#[test]
fn a_mismatched_answer_id_is_a_protocol_error() {
    let home = tempfile::tempdir().unwrap();
    let status = status_json(home.path());
    let _server = fake_daemon(home.path(), move |_| Some(Response::ok(json!(999), status.clone())));
    let mut client = Client::connect(&ConnectOptions::new(home.path())).unwrap();
    let err = client.call::<method::Status>(NoParams {}).unwrap_err();
    assert!(matches!(err, ClientError::Protocol { .. }), "{err:?}");
}

#[test]
fn no_daemon_without_autostart_is_one_clear_sentence() {
    let home = tempfile::tempdir().unwrap();
    let mut opts = ConnectOptions::new(home.path());
    opts.autostart = false;
    let err = Client::connect(&opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no daemon is running for {}; start one with `stockade daemon start`",
            home.path().display()
        )
    );
    assert!(Client::connect_existing(&opts).unwrap().is_none());

    // A stale socket file (nobody listening) is the same as none.
    drop(UnixListener::bind(home.path().join("stockade.sock")).unwrap());
    assert!(matches!(Client::connect(&opts).unwrap_err(), ClientError::NotRunning { .. }));
}

#[test]
fn a_daemon_that_cannot_start_is_reported_with_its_log() {
    let home = tempfile::tempdir().unwrap();
    let mut opts = ConnectOptions::new(home.path().join("state"));
    opts.daemon_program = Some("/bin/false".into());
    let started = Instant::now();
    let err = Client::connect(&opts).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ClientError::AutostartFailed { .. }), "{err:?}");
    assert!(text.contains("exited") && text.contains("daemon.log"), "{text}");
    // It gives up once the daemon is gone, well before the start deadline.
    assert!(started.elapsed() < opts.start_timeout, "{:?}", started.elapsed());
    let log = std::fs::read_to_string(home.path().join("state/daemon.log")).unwrap();
    assert!(log.contains("starting"), "{log}");

    opts.daemon_program = Some("/no/such/stockade".into());
    let text = Client::connect(&opts).unwrap_err().to_string();
    assert!(text.contains("cannot run /no/such/stockade"), "{text}");
}
