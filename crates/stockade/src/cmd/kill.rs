//! `stockade kill`, `forget` and `cleanup`: ending sessions through the daemon. Each prints the
//! terminate report as it is: "terminated" only when every process is verified gone.

use std::process::ExitCode;

use stockade_core::answer;
use stockade_proto::TerminateReport;
use stockade_proto::rpc::{CleanupParams, ForgetParams, KillParams, method};

use super::Global;
use crate::cli::{CleanupArgs, ForgetArgs, KillArgs};
use crate::out;

pub fn kill(global: &Global, args: KillArgs) -> anyhow::Result<ExitCode> {
    let params = KillParams { id: args.id.clone(), signal: args.signal, grace_ms: args.grace_ms };
    let result = global.connect()?.call::<method::Kill>(params)?;
    if args.json {
        out::print_json(&result)?;
    } else {
        out::print(&format!(
            "{}\n{}\n",
            answer::status_line(&result.id, &result.state),
            report_line(&result.report)
        ))?;
    }
    Ok(exit(Some(&result.report)))
}

pub fn forget(global: &Global, args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let result = global.connect()?.call::<method::Forget>(ForgetParams { id: args.id.clone() })?;
    if args.json {
        out::print_json(&result)?;
    } else {
        let mut text = format!(
            "Forgot {}: removed {} of output\n",
            result.id,
            out::bytes(result.removed_bytes)
        );
        if let Some(report) = &result.report {
            text.push_str(&report_line(report));
            text.push('\n');
        }
        out::print(&text)?;
    }
    Ok(exit(result.report.as_ref()))
}

pub fn cleanup(global: &Global, args: CleanupArgs) -> anyhow::Result<ExitCode> {
    let result = global.connect()?.call::<method::Cleanup>(CleanupParams { all: args.all })?;
    if args.json {
        out::print_json(&result)?;
    } else if result.forgotten.is_empty() {
        out::print(if args.all {
            "Nothing to clean up\n"
        } else {
            "Nothing to clean up (running sessions are kept; --all forgets them too)\n"
        })?;
    } else {
        let n = result.forgotten.len();
        out::print(&format!(
            "Forgot {n} session{} ({}): removed {} of output\n",
            if n == 1 { "" } else { "s" },
            result.forgotten.join(", "),
            out::bytes(result.removed_bytes)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What terminating did, in one line ("nothing was running" when nothing had to be signalled).
fn report_line(report: &TerminateReport) -> String {
    if report.terminated && report.pids_signalled.is_empty() {
        "Process tree: nothing was left running".into()
    } else {
        answer::cleanup_line(report)
    }
}

/// 1 when a process of the session survived.
fn exit(report: Option<&TerminateReport>) -> ExitCode {
    if report.is_some_and(|r| !r.terminated) { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
