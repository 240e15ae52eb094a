//! A sandboxed run finds its Landlock ruleset built ahead of its spawn — also right after many
//! sandboxed sessions were forgotten at once (`cleanup`) and their private temporary
//! directories made ready again: the daemon builds ahead only for the next directories in line,
//! so none of those has its ruleset dropped before a run takes it (and no run builds one while
//! its client waits). Counted by `stockade_sandbox_rulesets_ready` and
//! `stockade_sandbox_rulesets_built_on_spawn` on `/metrics`.

use std::time::Duration;

use serde_json::json;
use stockade_testkit::DaemonProc;

use crate::metrics_addr::{metrics_addr, scrape};

/// Sandboxed sessions forgotten at once: more than the daemon keeps rulesets built (32).
const BURST: usize = 48;

#[test]
fn sandboxed_runs_after_a_cleanup_of_many_find_their_rulesets_built() {
    // A home whose ancestors do not change while the test runs: a new entry in one of them (a
    // busy /tmp, where the other tests make theirs) has the daemon list them again, and a
    // ruleset built for the old listing is then not used (it would not grant the new entry).
    let base = tempfile::Builder::new().prefix("stockade-ahead-").tempdir_in("/var/tmp").unwrap();
    let daemon = DaemonProc::start_at(&base.path().join("home"), &["--metrics", "127.0.0.1:0"])
        .expect("the daemon starts");
    let (addr, _) = metrics_addr(&daemon, "http");
    let counts = || {
        let m = scrape(&format!("http://{addr}/metrics"), None, None);
        let num = |name: &str| {
            m["samples"][name].as_f64().unwrap_or_else(|| panic!("{name} in {m}")) as usize
        };
        (
            num("stockade_sandbox_rulesets_ready_total"),
            num("stockade_sandbox_rulesets_built_on_spawn_total"),
        )
    };
    let work = tempfile::tempdir().unwrap();
    let params = json!({
        "command": "true",
        "cwd": work.path(),
        "sandbox": {"mode": "workspace-write", "network": "none"},
    });
    let mut rpc = daemon.client();
    let mut burst = || {
        for _ in 0..BURST {
            // A command's pace, not a tight loop: what is built ahead has time to be built.
            std::thread::sleep(Duration::from_millis(20));
            let run = rpc.ok("run", params.clone());
            assert_eq!((&run["state"], &run["code"]), (&json!("exited"), &json!(0)), "{run}");
        }
    };
    burst();
    let cleaned = daemon.client().ok("cleanup", json!({}));
    assert_eq!(cleaned["forgotten"].as_array().map(Vec::len), Some(BURST), "{cleaned}");
    let (ready, built) = counts();
    assert_eq!(ready + built, BURST, "one ruleset per sandboxed run");
    burst();
    let (ready_after, built_after) = counts();
    assert_eq!(ready_after + built_after, 2 * BURST);
    // The first run after the cleanup may come before anything was built for it.
    assert!(
        built_after - built <= 2,
        "{} of {BURST} sandboxed runs after the cleanup built their ruleset while the client waited",
        built_after - built
    );
}
