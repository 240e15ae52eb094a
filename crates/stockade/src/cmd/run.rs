//! `stockade run`: one command in the foreground through an in-process engine, or with `--bg`
//! in the background through the daemon. A foreground run on a terminal streams the output live
//! from the log (bounded chunks; the spool keeps it all), then prints the summary; when stdin is
//! that terminal too, the command gets a terminal of its own (`run_pty.rs`). Other `--pty` runs
//! go through the daemon (the session can then be typed into with `send`/`attach`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use stockade_engine::{Engine, EngineConfig, RunSpec, Session};
use stockade_log::answer;
use stockade_log::{OutputLog, ReadRequest};
use stockade_proc::{CgroupMode, ContainmentConfig};
use stockade_proto::rpc::{PtySize, RunParams, StdinMode, method};
use stockade_proto::{ReadMode, RunResult, Signal};

use crate::args::{
    CaptureArg, DiskPolicyArg, LimitArgs, parse_duration, parse_env, parse_ms, parse_retained_cap,
    parse_size_u64, path_parser,
};
use crate::global::Global;
use crate::out;

/// `stockade run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The command: one shell string (`'ls | wc -l'`), or words after `--` (quoted for the shell).
    #[arg(required = true, num_args = 1.., value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<String>,
    /// The shell that runs the command.
    #[arg(long, value_name = "PATH", default_value = "/bin/sh", value_parser = path_parser())]
    pub shell: PathBuf,
    /// Run the shell as a login shell (`-lc`).
    #[arg(long)]
    pub login: bool,
    /// Working directory.
    #[arg(long, value_name = "DIR", value_parser = path_parser())]
    pub cwd: Option<PathBuf>,
    /// Extra environment variable (repeatable), on top of this shell's environment.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Start the command from an empty environment instead of this shell's (`--env` on top).
    #[arg(long)]
    pub env_clear: bool,
    /// Terminate the whole process tree after this long: 30s, 500ms, 10m, 1h (a plain number is
    /// seconds); exit status 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// `--timeout` in milliseconds (a duration with a unit, e.g. 5s, is taken too).
    #[arg(long, value_name = "MS", value_parser = parse_ms, allow_hyphen_values = true)]
    #[arg(conflicts_with = "timeout")]
    pub timeout_ms: Option<u64>,
    /// Grace between SIGTERM and SIGKILL when the tree is terminated (timeout, disk cap, what is
    /// left at exit, Ctrl-C), in milliseconds or with a unit (2s); with `--bg`/`--pty`, for that
    /// session (at most 60s) [default: 2000, or the daemon's `--grace-ms`].
    #[arg(long, value_name = "MS", value_parser = parse_ms, allow_hyphen_values = true)]
    pub grace_ms: Option<u64>,
    /// Which part of the output to show when it is too long.
    #[arg(long, value_enum, default_value = "tail")]
    pub direction: Direction,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub sandbox: crate::sandbox_args::SandboxArgs,
    /// `pipe`: one pipe for stdout and stderr (write order kept); `split`: a pipe each (`--stream`
    /// reads them apart, cross-stream order best-effort); `file`: straight into the spool.
    #[arg(long, value_enum, default_value = "pipe")]
    pub capture: CaptureArg,
    /// Bytes of the newest output kept in memory once the spool stops (disk cap or disk full),
    /// so `keep-head-tail` can write them at the end; until then output goes only to the spool.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_retained_cap)]
    pub retained_cap: usize,
    /// Most bytes written to the spool file for this command.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size_u64)]
    pub disk_cap: u64,
    /// What happens at the disk cap: `kill` the command, or `keep-head-tail` (drop the middle).
    #[arg(long, value_enum, default_value = "kill")]
    pub disk_policy: DiskPolicyArg,
    /// Do not use a cgroup even where one is available (process group + /proc scan only).
    /// Foreground only: for `--bg`, start the daemon with `stockade daemon run --no-cgroup`.
    #[arg(long, conflicts_with = "bg")]
    pub no_cgroup: bool,
    /// Run in the background through the daemon (started on demand); answer after `--yield-ms`.
    #[arg(long, alias = "background")]
    pub bg: bool,
    /// With `--bg`: wait this long for output or exit before answering (default 0).
    #[arg(long, value_name = "MS", requires = "bg", value_parser = parse_ms)]
    #[arg(allow_hyphen_values = true)]
    pub yield_ms: Option<u64>,
    /// With `--bg`: a dedup key; if a running session has it, answer with that one instead of
    /// starting a second copy.
    #[arg(long, value_name = "KEY", requires = "bg")]
    pub source: Option<String>,
    /// With `--bg` or `--pty`: the idempotency key of this run (1–128 printable characters). A
    /// run whose key the daemon still knows starts nothing and answers with that session, so a
    /// run retried after a timeout or a lost connection never starts a second copy. Without
    /// it, one is made for each call and named if the call fails that way.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Run on a pseudo-terminal: for REPLs, shells and full-screen programs. With `--bg`,
    /// type into it with `send` or `attach`. A foreground run whose stdin and stdout are
    /// terminals gets one by default, sized like yours, with what you type forwarded.
    #[arg(long, conflicts_with_all = ["no_cgroup", "stdin", "no_pty"])]
    pub pty: bool,
    /// A foreground run on a terminal without a pseudo-terminal: the command's stdin is
    /// `/dev/null` and its output a pipe (as when stdout is piped).
    #[arg(long)]
    pub no_pty: bool,
    /// With `--pty`: terminal rows.
    #[arg(long, value_name = "N", default_value_t = 24, requires = "pty")]
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub rows: u16,
    /// With `--pty`: terminal columns.
    #[arg(long, value_name = "N", default_value_t = 80, requires = "pty")]
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub cols: u16,
    /// With `--bg`: `pipe` gives the command a stdin that `send` writes to (`--close-stdin`
    /// ends it); default `/dev/null`.
    #[arg(long, value_enum, value_name = "null|pipe", requires = "bg")]
    pub stdin: Option<StdinArg>,
    /// Print the structured result as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// With `--bg`: print only the session id and a newline (`id=$(stockade run --bg -q make)`).
    #[arg(short = 'q', long, requires = "bg", conflicts_with = "json")]
    pub quiet: bool,
}

impl RunArgs {
    /// `--timeout` or `--timeout-ms`, in milliseconds (the wire's unit).
    fn timeout_ms(&self) -> Option<u64> {
        let from_duration = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.timeout_ms.or(self.timeout.map(from_duration))
    }
}

/// Which part of the output a bounded answer shows.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Direction {
    /// The end (default): results and the last error are usually there.
    Tail,
    /// The start: with compiler errors the first one is the cause.
    Head,
    /// Both ends, with a marker where the middle was left out.
    Middle,
}

impl From<Direction> for ReadMode {
    fn from(d: Direction) -> ReadMode {
        match d {
            Direction::Tail => ReadMode::Tail,
            Direction::Head => ReadMode::Head,
            Direction::Middle => ReadMode::Middle,
        }
    }
}

/// `--stdin`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StdinArg {
    /// `/dev/null`.
    Null,
    /// A pipe fed by `stockade send`.
    Pipe,
}

pub fn run(global: &Global, args: RunArgs) -> anyhow::Result<ExitCode> {
    // A remote daemon runs a foreground command too (and ends it if this client goes away);
    // its paths are the remote machine's, so they are not checked here.
    if global.remote.is_none() {
        check_paths(&args)?;
    } else if args.no_cgroup {
        // The remote daemon runs it under its own containment: the flag would do nothing.
        anyhow::bail!(
            "--no-cgroup cannot be used with --remote: start the remote daemon with `stockade daemon run --no-cgroup` instead"
        );
    }
    // On the caller's terminal a foreground run gets one too, unless told otherwise.
    let on_terminal = !args.bg
        && !args.no_pty
        && !args.json
        && global.remote.is_none()
        && super::run_pty::on_terminal();
    if args.bg || (args.pty && !on_terminal) || global.remote.is_some() {
        return background(global, args);
    }
    if args.idempotency_key.is_some() {
        anyhow::bail!(
            "--idempotency-key names a run the daemon makes; this one runs here, in this process: add --bg (or use --remote)"
        );
    }
    let state_dir = crate::global::state_dir(global.home.clone())?;
    // What the home's daemon keeps from sandboxes and where it audits: this run does the same.
    let doors = stockade_daemon::HomeDoors::read(state_dir.root());
    let mut config = EngineConfig::new(state_dir, crate::global::oneshot_instance());
    config.sandbox.hidden.extend(doors.hidden.iter().cloned());
    config.grace = Duration::from_millis(args.grace_ms.unwrap_or(stockade_proto::DEFAULT_GRACE_MS));
    if args.no_cgroup {
        config.containment =
            ContainmentConfig { cgroup: CgroupMode::Off, ..ContainmentConfig::default() };
    }
    // The same request the daemon gets for `--bg`, so both answer alike; a foreground run has
    // no dedup partner in a one-shot engine.
    let params =
        RunParams { stdin: StdinMode::Null, source: None, ..params(&args, args.cwd.clone()) };
    let request = ReadRequest::for_run(&params);
    let spec = RunSpec { stdin_from: piped_stdin(), ..RunSpec::from(params) };
    let live = !args.json && std::io::stdout().is_terminal();
    let (by_signal, result) = if on_terminal {
        let fallback = PtySize { rows: args.rows, cols: args.cols };
        let spec = RunSpec { stdin_from: None, ..spec };
        let (by_signal, session, newline) =
            super::run_pty::run(config, spec, fallback, &doors, stream)?;
        (by_signal, Answer::streamed(&session, newline))
    } else {
        foreground(config, spec, &request, &doors, live)?
    };
    let code = print_answer(result, args.json)?;
    if let Some(sig) = by_signal {
        // The tree is gone and the summary printed: now die of the same signal, as the command
        // would have in a shell, so a calling shell's loop stops (a shell goes on after a child
        // that merely exited with 130 or 137).
        die_of(sig);
    }
    Ok(code)
}

/// A foreground run without a terminal of its own: the output streamed live (`live`) or
/// answered bounded by `request`; the signal this client got, if one ended it.
fn foreground(
    config: EngineConfig,
    spec: RunSpec,
    request: &ReadRequest,
    doors: &stockade_daemon::HomeDoors,
    live: bool,
) -> anyhow::Result<(Option<Signal>, Answer)> {
    let rt = crate::global::runtime()?;
    rt.block_on(async {
        // Listen before the command starts: a signal that came between its start and the first
        // look would kill this client with its default action and leave the tree running.
        let interrupted = interrupted()?;
        let engine = Engine::new(config)?;
        let session = engine.run(spec)?;
        super::run_pty::audit_foreground(doors, &session);
        let streamed = live.then(|| tokio::spawn(stream(Arc::clone(session.log()))));
        // Ctrl-C or SIGTERM to this client ends the command's whole tree, through the same
        // terminate routine as everything else.
        let mut by_signal = None;
        tokio::select! {
            // A signal to this client counts even when the command ended at the same moment:
            // the client must die of it, so a calling shell's loop stops.
            biased;
            sig = interrupted => {
                session.kill(engine.terminate_options(), "interrupted (the client got SIGINT/SIGTERM)").await;
                by_signal = Some(sig);
            }
            _ = session.wait(None) => {}
        }
        if let Some(streamed) = streamed {
            // The log is finished once the session ended: the stream drains it and stops.
            let ended_with_newline = streamed.await??;
            return anyhow::Ok((by_signal, Answer::streamed(&session, ended_with_newline)));
        }
        anyhow::Ok((by_signal, Answer::Bounded(session.run_result(request, false, None)?)))
    })
}

/// Prints a foreground run's answer; the exit status it gives.
fn print_answer(result: Answer, json: bool) -> anyhow::Result<ExitCode> {
    match result {
        Answer::Bounded(result) => print_result(&result, json, false),
        Answer::Streamed { id, state, wall_time, cleanup, spool, ended_with_newline, sandbox } => {
            // The output is on the screen already: the summary and where all of it is kept.
            let mut text = String::new();
            if !ended_with_newline {
                text.push('\n');
            }
            text.push_str(&answer::status_line(&id, &state));
            text.push_str(&format!("\nWall time: {:.2} s\n", wall_time.as_secs_f64()));
            text.push_str(&session_line(&id, &state));
            if let Some(policy) = &sandbox {
                text.push_str(&format!("Ran under {policy}\n"));
            }
            if let Some(report) = &cleanup {
                text.push_str(&answer::cleanup_line(report));
                text.push('\n');
            }
            text.push_str(&format!(
                "[Full output: {}. Read it again: stockade read {id}, or stockade grep {id} REGEX]\n",
                spool.display()
            ));
            out::print(&text)?;
            Ok(ExitCode::from(answer::exit_status(&state).clamp(0, 255) as u8))
        }
    }
}

/// What a foreground run ends with: the bounded answer, or (streamed live) only the facts for
/// the summary.
#[allow(clippy::large_enum_variant, reason = "one value per foreground run; boxing buys nothing")]
enum Answer {
    Bounded(RunResult),
    Streamed {
        id: String,
        state: stockade_proto::SessionState,
        wall_time: Duration,
        cleanup: Option<stockade_proto::TerminateReport>,
        spool: PathBuf,
        ended_with_newline: bool,
        sandbox: Option<String>,
    },
}

impl Answer {
    /// The summary of `session`, ended, whose output was streamed live.
    fn streamed(session: &Session, ended_with_newline: bool) -> Answer {
        Answer::Streamed {
            id: session.id().to_owned(),
            state: session.state(),
            wall_time: session.wall_time(),
            cleanup: session.end().and_then(|e| e.cleanup),
            spool: session.log().spool_path().to_owned(),
            ended_with_newline,
            sandbox: session
                .spec()
                .and_then(|s| s.sandbox_in_force.as_ref())
                .map(ToString::to_string),
        }
    }
}

/// Bytes copied from the log to the terminal at a time: memory stays bounded whatever the
/// command prints, since the log (spool and hot tail) holds the output, not this copy.
const STREAM_CHUNK: usize = 64 * 1024;

/// Copy the log to stdout as it grows, until it is finished and fully copied. Returns whether
/// the last byte written was a newline (or nothing was written).
async fn stream(log: Arc<OutputLog>) -> anyhow::Result<bool> {
    let mut cursor = 0;
    let mut last = b'\n';
    loop {
        let finished = log.stats().finished;
        let (bytes, next) = log.read_raw(cursor, STREAM_CHUNK)?;
        if let Some(&b) = bytes.last() {
            last = b;
            out::print_bytes(&bytes)?;
        } else if next > cursor {
            // A range the disk policy dropped: say so where it was.
            let note = format!("[… {} bytes dropped here …]\n", next - cursor);
            out::print(&note)?;
            last = b'\n';
        }
        if next == cursor {
            if finished {
                return Ok(last == b'\n');
            }
            log.wait_for_output(cursor, Duration::from_millis(500)).await;
        }
        cursor = next;
    }
}

/// Longest a foreground run through the daemon (`--pty` without `--bg`) is waited for.
const FOREGROUND_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `run --bg` (or `--pty`): the daemon runs it; this client only prints the answer. A
/// foreground `--pty` run is waited for; if this client goes away (Ctrl-C), the daemon
/// terminates it.
fn background(global: &Global, args: RunArgs) -> anyhow::Result<ExitCode> {
    // The daemon has its own working directory and environment: send ours (or an absolute
    // --cwd). A remote daemon's machine is not ours: only an explicit --cwd (its path there) is
    // sent, and no environment.
    let remote = global.remote.is_some();
    piped_stdin_to_the_daemon(&args)?;
    let cwd = match (&global.remote, &args.cwd) {
        (Some(_), cwd) => cwd.clone(),
        (None, cwd) => {
            Some(std::path::absolute(cwd.clone().unwrap_or_else(|| PathBuf::from(".")))?)
        }
    };
    let mut params = params(&args, cwd);
    params.base_env = crate::caller::base_env(args.env_clear, remote);
    let key = params.idempotency_key.get_or_insert_with(new_idempotency_key).clone();
    let mut client = global.connect()?;
    let result = if args.bg {
        client.call::<method::Run>(params).map_err(|e| name_the_key(e, &key))?
    } else {
        // The daemon ends a timed-out tree within the session's grace, then answers.
        let grace = args.grace_ms.unwrap_or(stockade_proto::rpc::MAX_GRACE_MS);
        let wait = args
            .timeout_ms()
            .map_or(FOREGROUND_WAIT, |t| Duration::from_millis(t.saturating_add(grace)));
        client.call_waiting::<method::Run>(params, wait).map_err(|e| name_the_key(e, &key))?
    };
    if args.quiet {
        return print_id(&result);
    }
    print_result(&result, args.json, remote)
}

/// The directory and shell the user named, checked here so the error names the flag they typed
/// (the engine's own check words it for every door alike).
fn check_paths(args: &RunArgs) -> anyhow::Result<()> {
    match &args.cwd {
        Some(cwd) => match std::fs::metadata(cwd) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => anyhow::bail!(
                "--cwd {} is not a directory; pass a directory to run in",
                cwd.display()
            ),
            Err(_) => anyhow::bail!(
                "--cwd {} does not exist; create it or pass another directory",
                cwd.display()
            ),
        },
        None => {
            if std::env::current_dir().is_err() {
                anyhow::bail!(
                    "the current directory was deleted; cd to an existing directory or pass --cwd DIR"
                );
            }
        }
    }
    match std::fs::metadata(&args.shell) {
        Ok(m) if m.is_file() => Ok(()),
        _ => anyhow::bail!(
            "--shell {} is not a program that exists; pass an existing shell, e.g. --shell /bin/bash",
            args.shell.display()
        ),
    }
}

/// The `run` request `args` describe, with working directory `cwd`.
fn params(args: &RunArgs, cwd: Option<PathBuf>) -> RunParams {
    RunParams {
        command: shell_command(&args.command),
        cwd,
        env: args.env.iter().cloned().collect(),
        // A foreground run's engine is this process: it starts from this environment already.
        base_env: args.env_clear.then(Default::default),
        shell: Some(args.shell.clone()),
        login: args.login,
        background: args.bg,
        timeout_ms: args.timeout_ms(),
        grace_ms: args.grace_ms,
        yield_ms: args.yield_ms,
        source: args.source.clone(),
        capture: args.capture.into(),
        max_bytes: Some(args.limits.max_bytes),
        max_lines: Some(args.limits.max_lines),
        direction: Some(args.direction.into()),
        retained_cap: Some(args.retained_cap),
        disk_cap: Some(args.disk_cap),
        disk_policy: Some(args.disk_policy.into()),
        pty: args.pty.then_some(PtySize { rows: args.rows, cols: args.cols }),
        stdin: match args.stdin {
            Some(StdinArg::Pipe) => StdinMode::Pipe,
            _ => StdinMode::Null,
        },
        until: None,
        sandbox: args.sandbox.policy(),
        ceiling: None,
        idempotency_key: args.idempotency_key.clone(),
    }
}

/// A fresh idempotency key for one call of this CLI.
pub(crate) fn new_idempotency_key() -> String {
    stockade_client::new_idempotency_key("cli")
}

/// A call that may have started its command (no answer in time, or the connection lost) says
/// so, with the key that finds it.
fn name_the_key(e: stockade_client::ClientError, key: &str) -> anyhow::Error {
    may_have_happened(
        e,
        &format!(
            "the command may have started: see `stockade ps --key {key}`, or run it again with `--idempotency-key {key}` to get that session instead of a second copy"
        ),
    )
}

/// A keyed call's error: one that may have taken effect (no answer in time, or the connection
/// lost) adds `what_now` — what may have happened and how its key finds out; any other is as
/// it was.
pub(crate) fn may_have_happened(e: stockade_client::ClientError, what_now: &str) -> anyhow::Error {
    if e.may_have_taken_effect() { anyhow::anyhow!("{e}; {what_now}") } else { e.into() }
}

/// Prints a `run` answer; `remote` adds where it ran (the caller cannot see that machine).
pub(crate) fn print_result(
    result: &RunResult,
    json: bool,
    remote: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        out::print_json(result)?;
    } else {
        let mut text = answer::render(
            &result.id,
            &result.state,
            Duration::from_millis(result.wall_time_ms),
            &out::view_text(&result.view, Some(&result.id)),
            result.cleanup.as_ref(),
        );
        // After the wall time, so the first lines read as they always did.
        let at = text.match_indices('\n').nth(1).map_or(text.len(), |(i, _)| i + 1);
        text.insert_str(at, &session_line(&result.id, &result.state));
        if let Some(policy) = &result.sandbox {
            // After the status line: what the command could and could not touch.
            let at = text.find('\n').map_or(text.len(), |i| i + 1);
            text.insert_str(at, &format!("Ran under {policy}\n"));
        }
        if result.deduplicated {
            // After the status line: no second copy was started.
            let at = text.find('\n').map_or(text.len(), |i| i + 1);
            text.insert_str(
                at,
                "Deduplicated: a running session has this --source; no new command was started\n",
            );
        }
        if let Some(cwd) = result.cwd.as_ref().filter(|_| remote) {
            let at = text.find('\n').map_or(text.len(), |i| i + 1);
            text.insert_str(at, &format!("Ran in: {}\n", cwd.display()));
        }
        out::print(&text)?;
    }
    Ok(ExitCode::from(answer::exit_status(&result.state).clamp(0, 255) as u8))
}

/// `Session: sh-3` and a newline, for an answer whose status line does not name its session
/// already (a script reading the answer finds the id either way).
fn session_line(id: &str, state: &stockade_proto::SessionState) -> String {
    if answer::status_line(id, state).contains(id) {
        return String::new();
    }
    format!("Session: {id}\n")
}

/// `-q`: the session id alone and a newline; the exit status is the answer's, as without `-q`.
pub(crate) fn print_id(result: &RunResult) -> anyhow::Result<ExitCode> {
    out::print(&format!("{}\n", result.id))?;
    Ok(ExitCode::from(answer::exit_status(&result.state).clamp(0, 255) as u8))
}

/// Join command words into one shell string. A single word is taken as a shell string as it is
/// (`stockade run 'ls | wc -l'`); several are quoted so the shell runs exactly those words.
fn shell_command(words: &[String]) -> String {
    if let [one] = words {
        return one.clone();
    }
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe { word.to_owned() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

/// This client's stdin for the command, as a shell hands it on, when it is a pipe or a file
/// (`echo hi | stockade run cat`). A terminal is not handed on (the command gets `/dev/null`),
/// nor is a closed stdin.
fn piped_stdin() -> Option<Arc<std::os::fd::OwnedFd>> {
    use std::os::fd::AsFd as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return None;
    }
    stdin.as_fd().try_clone_to_owned().ok().map(Arc::new)
}

/// What a run the daemon makes does with this client's piped stdin, which it cannot hand on:
/// `--pty` (a foreground run on a terminal of its own) refuses it; `--bg` says where it goes.
fn piped_stdin_to_the_daemon(args: &RunArgs) -> anyhow::Result<()> {
    if (args.pty || args.bg) && stdin_is_piped() {
        if !args.bg {
            // The command would wait for a terminal nobody types into.
            anyhow::bail!(
                "--pty gives the command a terminal of its own and cannot take this piped stdin: drop --pty to hand the pipe on (`echo hi | stockade run cat`), or start it with --pty --bg and type into it with `stockade send`"
            );
        }
        let instead = match (args.pty, args.stdin.is_some()) {
            (true, _) => "its own terminal, which `stockade send` types into",
            (false, true) => "a pipe `stockade send` writes to",
            (false, false) => "/dev/null",
        };
        eprintln!(
            "stockade: note: --bg does not hand this piped stdin on (the command's stdin is {instead}); run without --bg to hand it on, or feed the session with `stockade send`"
        );
    }
    Ok(())
}

/// Whether this client's stdin is a pipe or a file (something a shell piped or redirected in),
/// rather than a terminal, `/dev/null` or nothing.
fn stdin_is_piped() -> bool {
    use std::os::fd::AsFd as _;
    rustix::fs::fstat(std::io::stdin().as_fd()).is_ok_and(|st| {
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        matches!(kind, rustix::fs::FileType::Fifo | rustix::fs::FileType::RegularFile)
    })
}

/// The first SIGINT or SIGTERM this client gets, listened for from now on.
fn interrupted() -> anyhow::Result<impl std::future::Future<Output = Signal>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => Signal::SIGINT,
            _ = term.recv() => Signal::SIGTERM,
        }
    })
}

/// Ends this process by `sig` with its default action; exits 128 + its number should the signal
/// not end it.
fn die_of(sig: Signal) -> ! {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, pthread_sigmask, raise, signal};
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if let Ok(sig) = nix::sys::signal::Signal::try_from(sig.number()) {
        // SAFETY: `SigDfl` installs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigDfl) };
        let mut set = SigSet::empty();
        set.add(sig);
        let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
        let _ = raise(sig);
    }
    std::process::exit(128 + sig.number())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shell_command(&words(&["ls | wc -l"])), "ls | wc -l");
        assert_eq!(shell_command(&words(&["echo", "a b", "it's"])), r"echo 'a b' 'it'\''s'");
    }
}
