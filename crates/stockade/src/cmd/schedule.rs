//! `stockade schedule`: recurring runs kept by the daemon (add, list, rm, pause, resume, runs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use stockade_log::answer::signal_name;
use stockade_proto::SessionState;
use stockade_proto::rpc::{
    CatchUp, Method, NoParams, ScheduleAddParams, ScheduleInfo, ScheduleNameParams,
    ScheduleRunTemplate, ScheduleRunsParams, method,
};

use crate::args::{CaptureArg, DiskPolicyArg};
use crate::examples as ex;
use crate::global::Global;
use crate::out;

/// `stockade schedule`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ScheduleAction,
}

/// `stockade schedule <action>`.
// Parsed once per process: the size of the `add` variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Add a schedule: run COMMAND every interval or on a cron expression, in the background.
    ///
    /// Each fire is an ordinary session (`ps`, `logs`, `grep`, `kill` work on it) whose source is
    /// the schedule's key. A fire while the previous run is still active is skipped and counted,
    /// never queued. After the daemon was down, at most one catch-up fire (`--catch-up once`).
    #[command(after_help = ex::SCHEDULE_ADD)]
    Add(AddArgs),
    /// List the schedules: timing, next fire, fires, skipped overlaps, the run active now.
    #[command(alias = "ls", after_help = ex::SCHEDULE_LIST)]
    List(JsonArgs),
    /// Remove a schedule (its runs stay until pruned or forgotten).
    #[command(alias = "remove", after_help = ex::SCHEDULE_RM)]
    Rm(NameArgs),
    /// Stop firing a schedule until `resume`.
    #[command(after_help = ex::SCHEDULE_PAUSE)]
    Pause(NameArgs),
    /// Fire a paused schedule again, from its next tick (missed ticks are not caught up).
    #[command(after_help = ex::SCHEDULE_RESUME)]
    Resume(NameArgs),
    /// A schedule's recent runs, newest first: session, state, exit, duration, bytes.
    #[command(after_help = ex::SCHEDULE_RUNS)]
    Runs(RunsArgs),
    /// Fire a schedule now, as a tick would: skipped (exit 1) while its last run is active.
    ///
    /// Its next tick does not move. Prints the session started.
    #[command(after_help = ex::SCHEDULE_RUN)]
    Run(NameArgs),
}

/// `stockade schedule add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The schedule's name (letters, digits, `.`, `_`, `-`).
    pub name: String,
    #[command(flatten)]
    pub sandbox: crate::sandbox_args::SandboxArgs,
    /// The command: one shell string, or words after `--` (quoted for the shell).
    #[arg(required = true, num_args = 1.., value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<String>,
    /// Fire every this long: 30s, 5m, 1h 30m (at least 1s).
    #[arg(
        long,
        value_name = "DURATION",
        conflicts_with = "cron",
        required_unless_present = "cron",
        value_parser = parse_every
    )]
    pub every: Option<String>,
    /// Fire on this cron expression (5 fields, or 6 with seconds first; local time).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The source key of every run (default `schedule:NAME`).
    #[arg(long, value_name = "KEY")]
    pub source: Option<String>,
    /// Ticks missed while the daemon was down: `once` fires one catch-up run, `skip` none.
    #[arg(long, value_enum, default_value = "once")]
    pub catch_up: CatchUpArg,
    /// Finished runs kept; older ones are forgotten (spool and record) [default: 20].
    #[arg(long, value_name = "N")]
    pub keep_runs: Option<usize>,
    /// Most bytes the spools of finished runs may hold; the oldest are forgotten past it
    /// [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
    pub disk_budget: Option<u64>,
    /// The shell that runs the command [default: /bin/sh].
    #[arg(long, value_name = "PATH", value_parser = crate::args::path_parser())]
    pub shell: Option<PathBuf>,
    /// Run the shell as a login shell (`-lc`).
    #[arg(long)]
    pub login: bool,
    /// Working directory [default: this shell's].
    #[arg(long, value_name = "DIR", value_parser = crate::args::path_parser())]
    pub cwd: Option<PathBuf>,
    /// Extra environment variable (repeatable), on top of this shell's environment (captured
    /// now and kept with the schedule).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = crate::args::parse_env)]
    pub env: Vec<(String, String)>,
    /// Start each run from an empty environment instead of this shell's (`--env` on top).
    #[arg(long)]
    pub env_clear: bool,
    /// Terminate each run's whole process tree after this long: 30s, 10m, 1h (a plain number is
    /// seconds).
    #[arg(long, value_name = "DURATION", value_parser = crate::args::parse_duration)]
    #[arg(allow_hyphen_values = true)]
    pub timeout: Option<std::time::Duration>,
    /// `--timeout` in milliseconds (a duration with a unit, e.g. 5s, is taken too).
    #[arg(long, value_name = "MS", value_parser = crate::args::parse_ms, conflicts_with = "timeout")]
    #[arg(allow_hyphen_values = true)]
    pub timeout_ms: Option<u64>,
    /// `pipe`: one pipe for stdout and stderr (write order kept); `split`: a pipe each (`--stream`
    /// reads them apart, cross-stream order best-effort); `file`: straight into the spool.
    #[arg(long, value_enum, default_value = "pipe")]
    pub capture: CaptureArg,
    /// Bytes of the newest output kept in memory while a run is active.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
    pub retained_cap: Option<u64>,
    /// Most bytes written to each run's spool file.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_size_u64)]
    pub disk_cap: Option<u64>,
    /// What happens at the disk cap: `kill` the run, or `keep-head-tail`.
    #[arg(long, value_enum)]
    pub disk_policy: Option<DiskPolicyArg>,
    /// Print the added schedule as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--catch-up`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CatchUpArg {
    /// One fire for all the ticks missed while the daemon was down.
    Once,
    /// No fire for missed ticks; wait for the next one.
    Skip,
}

/// A schedule's name.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The schedule's name.
    pub name: String,
    /// Print the schedule as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Just `--json`.
#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `stockade schedule runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The schedule's name.
    pub name: String,
    /// Most runs to show.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn schedule(global: &Global, args: ScheduleArgs) -> anyhow::Result<ExitCode> {
    let mut client = global.connect()?;
    match args.action {
        ScheduleAction::Add(a) => {
            let json = a.json;
            let params = add_params(a, global.remote.is_some())?;
            let info = client.call::<method::ScheduleAdd>(params)?;
            print_one(&info, json, "Added")
        }
        ScheduleAction::List(a) => {
            let list = client.call::<method::ScheduleList>(NoParams {})?;
            if a.json {
                out::print_json(&list)?;
            } else if list.schedules.is_empty() {
                out::print("no schedules\n")?;
            } else {
                out::print(&super::schedule_table::table(&list.schedules))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ScheduleAction::Rm(a) => named::<method::ScheduleRemove>(&mut client, a, "Removed"),
        ScheduleAction::Pause(a) => named::<method::SchedulePause>(&mut client, a, "Paused"),
        ScheduleAction::Resume(a) => named::<method::ScheduleResume>(&mut client, a, "Resumed"),
        ScheduleAction::Run(a) => {
            let fired =
                client.call::<method::ScheduleFire>(ScheduleNameParams { name: a.name.clone() })?;
            if a.json {
                out::print_json(&fired)?;
            }
            let name = &fired.schedule.name;
            let (text, code) = match (&fired.session, &fired.error) {
                (Some(id), _) => {
                    (format!("Fired {name}: {id} (follow it: stockade logs -f {id})\n"), 0)
                }
                (None, Some(why)) => (format!("Could not fire {name}: {why}\n"), 1),
                (None, None) => (
                    format!(
                        "Skipped {name}: its last run {} is still active (skips so far: {})\n",
                        fired.schedule.active_session.as_deref().unwrap_or("?"),
                        fired.schedule.skipped_overlap
                    ),
                    1,
                ),
            };
            if !a.json {
                out::print(&text)?;
            }
            Ok(ExitCode::from(code))
        }
        ScheduleAction::Runs(a) => {
            let params = ScheduleRunsParams { name: a.name, limit: a.limit };
            let r = client.call::<method::ScheduleRuns>(params)?;
            if a.json {
                out::print_json(&r)?;
            } else if r.runs.is_empty() {
                out::print(&format!("{}: no runs kept\n", r.schedule.name))?;
            } else {
                let mut text = String::new();
                for run in &r.runs {
                    text.push_str(&format!(
                        "{:<8} {:<24} {:>7}  {} printed, {} on disk\n",
                        run.id,
                        state_word(&run.state),
                        out::duration_ms(run.wall_time_ms),
                        out::bytes(run.total_bytes),
                        out::bytes(run.spooled_bytes),
                    ));
                }
                out::print(&text)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A method that names one schedule and answers with it (`remove`, `pause`, `resume`).
fn named<M: Method<Params = ScheduleNameParams, Result = ScheduleInfo>>(
    client: &mut stockade_client::Client,
    a: NameArgs,
    verb: &str,
) -> anyhow::Result<ExitCode> {
    let info = client.call::<M>(ScheduleNameParams { name: a.name })?;
    print_one(&info, a.json, verb)
}

fn print_one(info: &ScheduleInfo, json: bool, verb: &str) -> anyhow::Result<ExitCode> {
    if json {
        out::print_json(info)?;
    } else {
        out::print(&format!("{verb} {}", describe(info)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The request `a` describe. A local caller's directory and environment go with it (the daemon
/// keeps them for every fire); a remote daemon's machine is not ours, so only an explicit
/// `--cwd` (its path there) is sent.
fn add_params(a: AddArgs, remote: bool) -> anyhow::Result<ScheduleAddParams> {
    let retained_cap = a
        .retained_cap
        .map(usize::try_from)
        .transpose()
        .map_err(|_| anyhow::anyhow!("--retained-cap is too large for this machine"))?;
    Ok(ScheduleAddParams {
        name: a.name,
        every: a.every,
        cron: a.cron,
        source: a.source,
        catch_up: match a.catch_up {
            CatchUpArg::Once => CatchUp::Once,
            CatchUpArg::Skip => CatchUp::Skip,
        },
        keep_runs: a.keep_runs,
        disk_budget: a.disk_budget,
        run: ScheduleRunTemplate {
            command: a.command.join(" "),
            cwd: match (remote, a.cwd) {
                (true, cwd) => cwd,
                (false, cwd) => Some(std::path::absolute(cwd.unwrap_or_else(|| ".".into()))?),
            },
            env: a.env.into_iter().collect(),
            base_env: crate::caller::base_env(a.env_clear, remote),
            shell: a.shell,
            login: a.login,
            timeout_ms: a
                .timeout_ms
                .or(a.timeout.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
            capture: a.capture.into(),
            retained_cap,
            disk_cap: a.disk_cap,
            disk_policy: a.disk_policy.map(Into::into),
            sandbox: a.sandbox.policy(),
        },
    })
}

/// `--every`: checked here so the error names the flag; a plain number is seconds (`30` is
/// sent as `30s`), as for every other time the CLI takes.
fn parse_every(s: &str) -> Result<String, String> {
    crate::args::parse_duration(s)?;
    let s = s.trim();
    Ok(if s.bytes().all(|b| b.is_ascii_digit()) { format!("{s}s") } else { s.to_owned() })
}

/// One schedule in a few lines.
fn describe(s: &ScheduleInfo) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let timing = match (&s.every, &s.cron) {
        (Some(every), _) => format!("every {every}"),
        (None, Some(cron)) => format!("cron '{cron}'"),
        (None, None) => "?".into(),
    };
    let next = match (s.paused, s.next_fire_ms) {
        (true, _) => "paused".to_owned(),
        (false, Some(t)) if t > now => format!("next in {}", out::duration_ms(t - now)),
        (false, Some(_)) => "due now".to_owned(),
        (false, None) => "no next fire".to_owned(),
    };
    let mut text = format!(
        "{}: {timing}, {next} (source {})\n  {}\n  {}\n  {} fired, {} skipped (still running), {} missed, {} failed",
        s.name,
        s.source,
        s.run.command,
        super::schedule_table::place(s),
        s.fires,
        s.skipped_overlap,
        s.missed,
        s.failed_fires
    );
    if let Some(id) = &s.active_session {
        text.push_str(&format!("; running now: {id}"));
    } else if let Some(id) = &s.last_session {
        text.push_str(&format!("; last run: {id}"));
    }
    text.push('\n');
    if let Some(e) = &s.last_error {
        text.push_str(&format!("  last error: {e}\n"));
    }
    text
}

/// A run's state in a few words: `running`, `exit 0`, `killed (reason)`.
fn state_word(state: &SessionState) -> String {
    match state {
        SessionState::Running => "running".into(),
        SessionState::Exited { code } => format!("exit {code}"),
        SessionState::Signaled { signal } => format!("signal {}", signal_name(*signal)),
        SessionState::Killed { reason } => format!("killed ({reason})"),
        SessionState::TimedOut => "timed out".into(),
        SessionState::Failed { reason } => format!("failed ({reason})"),
    }
}
