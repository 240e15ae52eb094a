//! A sandboxed session's private temporary directory (`TMPDIR`) is used again by a later
//! sandboxed session only when nothing of the first can still reach it (a cgroup verified
//! empty) and only as it was made: emptied, mode 0700, ours. One whose mode a command changed is
//! never handed out again; without a cgroup none is.

use std::collections::{BTreeMap, BTreeSet};

use crate::sandbox_common::{Sbx, User, users};

const WW: &[&str] = &["--sandbox", "workspace-write", "--network", "none"];

/// Runs `script` sandboxed; its output and the session's containment (`cgroup` or
/// `process-group`, from `ps`).
fn run(s: &Sbx, script: &str) -> (String, String) {
    let answer = s.run(WW, script);
    assert_eq!(answer["state"], "exited", "{answer}");
    let out = answer["output"].as_str().unwrap_or_default().to_owned();
    let id = answer["id"].as_str().unwrap_or_default();
    let ps = s.output(&["ps", "-a", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap_or_default();
    let containment = list["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|x| x["id"] == id))
        .and_then(|x| x["containment"].as_str())
        .unwrap_or_else(|| panic!("ps does not list {id}: {list}"))
        .to_owned();
    (out, containment)
}

/// What names a directory: its inode and its birth time to the nanosecond (an inode number
/// alone comes back on a directory made afresh where one was deleted).
const DIR_ID: &str = r#"echo dir=$(stat -c '%i/%w' "$TMPDIR")"#;

/// `key=value` lines of `out`.
fn fields(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn a_private_temporary_directory_is_used_again_only_emptied_and_as_made() {
    for user in users() {
        let s = Sbx::new(user);
        // The first sandboxed runs: one leaves files behind, one loosens its directory's mode.
        let (out, containment) = run(
            &s,
            &format!(
                r#"echo secret > "$TMPDIR/left"; mkdir "$TMPDIR/sub"; echo x > "$TMPDIR/sub/f"
                   {DIR_ID}"#
            ),
        );
        let left = fields(&out)["dir"].clone();
        let (out, _) = run(&s, &format!(r#"chmod 1777 "$TMPDIR"; {DIR_ID}"#));
        let loosened = fields(&out)["dir"].clone();
        // Forgotten: their directories are used again (or deleted).
        let cleanup = s.output(&["cleanup"]);
        assert!(cleanup.status.success(), "{cleanup:?}");
        let mut seen = BTreeSet::new();
        for _ in 0..12 {
            let (out, _) = run(
                &s,
                &format!(
                    r#"{DIR_ID}; echo mode=$(stat -c %a "$TMPDIR")
                       echo entries=$(ls -A "$TMPDIR" | wc -l); echo owner=$(stat -c %u "$TMPDIR")
                       touch "$TMPDIR/mine" && echo writable=yes"#
                ),
            );
            let f = fields(&out);
            assert_eq!(f["mode"], "700", "{user:?}: {out}");
            assert_eq!(f["entries"], "0", "{user:?}: a used-again TMPDIR must be empty: {out}");
            let me = if user == User::Root { "0" } else { "65534" };
            assert_eq!(f["owner"], me, "{user:?}: {out}");
            assert_eq!(f.get("writable").map(String::as_str), Some("yes"), "{out}");
            seen.insert(f["dir"].clone());
        }
        assert!(!seen.contains(&loosened), "{user:?}: a TMPDIR whose mode changed came back");
        if containment == "cgroup" {
            assert!(
                seen.contains(&left),
                "{user:?}: with a cgroup, the emptied TMPDIR {left} is used again (seen {seen:?})"
            );
        } else {
            assert!(!seen.contains(&left), "{user:?}: without a cgroup no TMPDIR is used again");
        }
    }
}
