//! The disk cap holds for file capture, where the command writes its spool itself: the cap is
//! the tree's file-size limit (`RLIMIT_FSIZE`), so `yes` under a 2 MiB cap leaves a 2 MiB spool
//! (it used to leave hundreds of megabytes before the next poll noticed), and the session ends
//! `killed (disk cap)`, not by the signal the kernel sent. Through the binary, daemon
//! auto-started.

use std::os::unix::fs::MetadataExt as _;

use stockade_testkit::{Home, text};

const CAP: u64 = 2 * 1024 * 1024;

/// The spool file of session `id` under `home`.
fn spool(home: &Home, id: &str) -> std::path::PathBuf {
    std::fs::read_dir(home.path().join("spool"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join(id).join("output.log"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no spool of {id}"))
}

/// Bytes the file takes on disk (allocated blocks), which is what a cap is for.
fn on_disk(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn file_capture_under_yes_stops_at_the_cap() {
    let home = Home::new();
    for command in ["yes", "yes; echo after >&2; sleep 30"] {
        let started = home.json_bg(&["--capture", "file", "--disk-cap", "2MiB", command]);
        let id = started["id"].as_str().unwrap().to_owned();
        let end = home.wait_finished(&id);
        assert_eq!(end["state"], "killed", "{command}: {end}");
        assert_eq!(end["reason"], "disk cap", "{command}: {end}");
        let path = spool(&home, &id);
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len, CAP, "{command}: the spool is exactly the cap");
        assert!(on_disk(&path) <= CAP + 1024 * 1024, "{command}: {} on disk", on_disk(&path));
        // What was written reads back: the last line is whole `y`s up to the cap.
        let out = home.run(&["read", &id, "--raw", "--after", &(CAP - 4).to_string()]);
        assert_eq!(out.stdout, b"y\ny\n", "{command}: {}", text(&out.stderr));
    }
    // A foreground run, too (no daemon in the path of the bytes either way).
    let out = home.run(&["run", "--capture", "file", "--disk-cap", "2MiB", "yes"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("disk cap"), "{stdout}{}", text(&out.stderr));
}

/// The price, documented in docs/usage.md: under file capture every file the command writes is
/// held to the disk cap.
#[test]
fn file_capture_holds_every_file_of_the_command_to_the_cap() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    let command = format!("head -c 3145728 /dev/zero > {} ; echo rc=$?", big.display());
    let started = home.json_bg(&["--capture", "file", "--disk-cap", "2MiB", &command]);
    let id = started["id"].as_str().unwrap().to_owned();
    home.wait_finished(&id);
    assert_eq!(std::fs::metadata(&big).unwrap().len(), CAP);
    let out = home.ok(&["logs", &id]);
    assert!(out.contains("rc=153") || out.contains("rc=1"), "{out}");
}
