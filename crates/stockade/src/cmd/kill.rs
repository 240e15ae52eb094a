//! `stockade kill`, `forget` and `cleanup`: ending sessions through the daemon (`kill` and
//! `forget` take several ids). Each prints the terminate report as it is: "terminated" only when
//! every process is verified gone.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Args;
use stockade_client::{Client, ClientError};
use stockade_log::answer;
use stockade_proto::TerminateReport;
use stockade_proto::rpc::{
    CleanupParams, ForgetParams, KillManyParams, KillManyResult, KillParams, KillResult, code,
    method,
};

use crate::global::Global;
use crate::out;

/// `stockade kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// The session ids (`sh-3 sh-4`).
    #[arg(required_unless_present = "all", value_name = "ID")]
    pub ids: Vec<String>,
    /// Every running session (no ids with it).
    #[arg(long)]
    pub all: bool,
    /// The first signal: TERM (default), INT, HUP, KILL, … or a number.
    #[arg(short = 's', long, value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// Grace between the first signal and SIGKILL, in milliseconds (default 2000).
    #[arg(long, value_name = "MS", value_parser = crate::args::parse_ms)]
    #[arg(allow_hyphen_values = true)]
    pub grace_ms: Option<u64>,
    /// Print the terminate report as JSON (an array when several ids are given).
    #[arg(long)]
    pub json: bool,
}

/// `stockade forget`.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The session ids (`sh-3 sh-4`).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Print the result as JSON (an array when several ids are given).
    #[arg(long)]
    pub json: bool,
}

/// `stockade cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Also terminate and forget running sessions.
    #[arg(long)]
    pub all: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn kill(global: &Global, args: KillArgs) -> anyhow::Result<ExitCode> {
    if args.all && !args.ids.is_empty() {
        anyhow::bail!("give either session ids or --all, not both");
    }
    let mut client = global.connect()?;
    if args.all || args.ids.len() > 1 {
        // One call for all: the daemon signals every tree first and ends them together.
        let params = KillManyParams {
            ids: args.ids.clone(),
            all: args.all,
            signal: args.signal.clone(),
            grace_ms: args.grace_ms,
        };
        match client.call::<method::KillMany>(params) {
            Ok(many) => return print_many(&args, many),
            // A daemon older than this client: one call per id, as it then did.
            Err(e) if e.rpc_code() == Some(code::METHOD_NOT_FOUND) && !args.all => {}
            Err(e) if e.rpc_code() == Some(code::METHOD_NOT_FOUND) => anyhow::bail!(
                "this daemon is older than `kill --all`; name the sessions instead: stockade kill $(stockade ps -q --state running)"
            ),
            Err(e) => return Err(e.into()),
        }
    }
    let params = |id: &String| KillParams {
        id: id.clone(),
        signal: args.signal.clone(),
        grace_ms: args.grace_ms,
    };
    let results =
        in_parallel(global, client, &args.ids, |c, id| c.call::<method::Kill>(params(id)));
    let mut each = Each::new(args.json, args.ids.len());
    for result in results {
        match result {
            Ok(result) => each.killed(&result)?,
            Err(e) => each.failed(e)?,
        }
    }
    each.finish()
}

/// Prints a `kill_many` answer as `kill` of each id would, in order.
fn print_many(args: &KillArgs, many: KillManyResult) -> anyhow::Result<ExitCode> {
    if args.all && many.results.is_empty() && !args.json {
        out::print("Nothing was running\n")?;
    }
    let mut each = Each::new(args.json, if args.all { 2 } else { many.results.len() });
    for one in many.results {
        match (one.result, one.error) {
            (Some(result), _) => each.killed(&result)?,
            (None, why) => {
                let why = why.unwrap_or_else(|| format!("{} was not ended; kill it again", one.id));
                each.failed(anyhow::anyhow!(why))?;
            }
        }
    }
    each.finish()
}

/// Most calls in flight at once (one connection each). Terminates the daemon runs at once share
/// their `/proc` census and overlap their grace, so ending a thousand sessions costs about what
/// a few dozen one after the other would; more connections would only queue behind the census.
const PARALLEL_CALLS: usize = 128;

/// Makes `call` for every id, on up to [`PARALLEL_CALLS`] connections at once (`first` is one of
/// them); the results in the order of `ids`. A connection that cannot be opened leaves its share
/// to the others.
fn in_parallel<T: Send>(
    global: &Global,
    first: Client,
    ids: &[String],
    call: impl Fn(&mut Client, &String) -> Result<T, ClientError> + Sync,
) -> Vec<anyhow::Result<T>> {
    let next = AtomicUsize::new(0);
    let work = |mut client: Client| {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(id) = ids.get(i) else { return done };
            done.push((i, call(&mut client, id).map_err(anyhow::Error::from)));
        }
    };
    let work = &work;
    let mut results: Vec<Option<anyhow::Result<T>>> = ids.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..ids.len().min(PARALLEL_CALLS))
            .filter_map(|_| global.connect().ok())
            .map(|client| scope.spawn(move || work(client)))
            .collect();
        let mut all = work(first);
        for helper in helpers {
            all.extend(helper.join().unwrap_or_default());
        }
        for (i, result) in all {
            results[i] = Some(result);
        }
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("the call was not made; try again"))))
        .collect()
}

pub fn forget(global: &Global, args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let client = global.connect()?;
    let results = in_parallel(global, client, &args.ids, |c, id| {
        c.call::<method::Forget>(ForgetParams { id: id.clone() })
    });
    let mut each = Each::new(args.json, args.ids.len());
    for result in results {
        match result {
            Ok(result) => {
                let mut text = format!(
                    "Forgot {}: removed {} of output\n",
                    result.id,
                    out::bytes(result.removed_bytes)
                );
                if let Some(report) = &result.report {
                    each.survived |= !report.terminated;
                    text.push_str(&report_line(report));
                    text.push('\n');
                }
                each.done(&result, &text)?;
            }
            Err(e) => each.failed(e)?,
        }
    }
    each.finish()
}

/// One command over several ids: every id is tried; an unknown one is reported on stderr and
/// the others still run. Exit status 2 if an id failed, else 1 if a process survived, else 0.
struct Each {
    json: bool,
    several: bool,
    results: Vec<serde_json::Value>,
    failed: bool,
    survived: bool,
}

impl Each {
    fn new(json: bool, ids: usize) -> Each {
        Each { json, several: ids > 1, results: Vec::new(), failed: false, survived: false }
    }

    fn done<T: serde::Serialize>(&mut self, result: &T, text: &str) -> anyhow::Result<()> {
        if !self.json {
            out::print(text)?;
        } else if self.several {
            self.results.push(serde_json::to_value(result)?);
        } else {
            out::print_json(result)?;
        }
        Ok(())
    }

    /// One session's kill answer: its status line and what terminating did.
    fn killed(&mut self, result: &KillResult) -> anyhow::Result<()> {
        self.survived |= !result.report.terminated;
        let text = format!(
            "{}\n{}\n",
            answer::status_line(&result.id, &result.state),
            report_line(&result.report)
        );
        self.done(result, &text)
    }

    fn failed(&mut self, e: anyhow::Error) -> anyhow::Result<()> {
        if !self.several {
            return Err(e);
        }
        eprintln!("stockade: {}", out::error_text(&e));
        self.failed = true;
        Ok(())
    }

    fn finish(self) -> anyhow::Result<ExitCode> {
        if self.json && self.several {
            out::print_json(&self.results)?;
        }
        Ok(if self.failed {
            ExitCode::from(2)
        } else if self.survived {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }
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
