//! `stockade doctor`: which containment is active here, and why.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use stockade_proc::{Containment, ContainmentConfig};

use stockade_proto::ContainmentMethod;

use crate::out;

/// `stockade doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn doctor(home: Option<PathBuf>, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let state_dir = crate::global::state_dir(home);
    let info = Containment::detect(&ContainmentConfig::default()).describe();
    let hiding = state_dir
        .as_ref()
        .ok()
        .and_then(|d| stockade_proc::sandbox::hiding_rules(&[d.root().to_owned()]).ok());
    if args.json {
        let value = serde_json::json!({
            "containment": info,
            "spawn": stockade_proc::spawn_method(),
            "sandbox": sandbox_lines(),
            "sandbox_hiding_rules": hiding,
            "state_dir": state_dir.as_ref().map(|d| d.root().display().to_string()).ok(),
            "state_dir_error": state_dir.as_ref().err().map(out::error_text),
        });
        out::print_json(&value)?;
    } else {
        let mut text = match info.method {
            ContainmentMethod::Cgroup => format!(
                "containment: cgroup v2 (one cgroup per session under {}, killed with cgroup.kill)\n",
                info.cgroup_root.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
            ),
            ContainmentMethod::ProcessGroup => format!(
                "containment: process group + /proc marker scan (no cgroup: {})\n",
                info.fallback_reason.as_deref().unwrap_or("cgroups are turned off")
            ),
        };
        if let Some(mount) = &info.cgroup_mount {
            text.push_str(&format!("cgroup2 mount: {}\n", mount.display()));
        }
        match (&info.subreaper, &info.subreaper_error) {
            (true, _) => {
                text.push_str("child subreaper: on (orphans of a session are reaped here)\n")
            }
            (false, Some(e)) => text.push_str(&format!("child subreaper: off ({e})\n")),
            (false, None) => text.push_str("child subreaper: off\n"),
        }
        text.push_str(
            "session keeper: used where sessions get no cgroup (`daemon run --session-keeper=auto`, the default; `always` or `never`): each session's orphans land on its own keeper, not on the daemon\n",
        );
        text.push_str(&format!("spawn: {}\n", stockade_proc::spawn_method()));
        for line in sandbox_lines() {
            text.push_str(&format!("sandbox: {line}\n"));
        }
        if let Some(n) = hiding {
            text.push_str(&format!(
                "sandbox: hiding the state directory takes {n} read rules (one per entry beside each directory on its way from /), which every sandboxed spawn copies{}\n",
                if n > BUSY_HOME_RULES {
                    ": a home in a less crowded directory (the default ~/.local/state) starts sandboxed commands faster"
                } else {
                    ""
                }
            ));
        }
        match &state_dir {
            Ok(d) => text.push_str(&format!("state directory: {} (ok)\n", d.root().display())),
            Err(e) => {
                text.push_str(&format!("state directory: NOT usable: {}\n", out::error_text(e)))
            }
        }
        out::print(&text)?;
    }
    Ok(if state_dir.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Read rules past which `doctor` suggests a less crowded home: each costs every sandboxed
/// spawn about a microsecond (about 0.3 ms at 370, on a 2-core machine).
const BUSY_HOME_RULES: usize = 100;

/// What this host can enforce of a sandbox: Landlock, seccomp, the limits.
fn sandbox_lines() -> Vec<String> {
    let mut lines = stockade_proc::sandbox::capabilities();
    lines.push(stockade_proc::namespaces::status());
    lines.extend(stockade_proc::limit_capabilities());
    lines
}
