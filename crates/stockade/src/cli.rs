//! The command line, declared with clap's derive API. Every subcommand's `--help` explains it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use stockade_proto::{ReadMode, Stream};

use crate::args::{
    CaptureArg, DiskPolicyArg, parse_age, parse_env, parse_retained_cap, parse_size_u64,
    parse_size_usize,
};
use crate::examples as ex;

/// Stockade runs shell commands for AI coding agents: it keeps every byte they print on disk,
/// shows a bounded, honest view of it, and makes sure nothing they started outlives them.
#[derive(Debug, Parser)]
#[command(name = "stockade", version, propagate_version = true, max_term_width = 100)]
#[command(next_help_heading = "Global options")]
pub struct Cli {
    /// State directory (spools, session records). Default: $XDG_STATE_HOME/stockade, else
    /// ~/.local/state/stockade.
    #[arg(long, global = true, env = "STOCKADE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Never start the daemon on demand: commands that need it fail with a clear error instead.
    #[arg(
        long,
        global = true,
        env = "STOCKADE_NO_AUTOSTART",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub no_autostart: bool,

    /// Talk to a remote daemon's WebSocket door instead of this machine's daemon:
    /// ws://HOST:PORT or wss://HOST:PORT (needs --token-file). E.g.
    /// `stockade --remote wss://10.0.0.5:7433 --token-file tok ps`.
    #[arg(long, global = true, env = "STOCKADE_REMOTE", value_name = "URL")]
    pub remote: Option<String>,

    /// With --remote: the file holding the door's token (mode 0600). Give it before the
    /// subcommand (`stockade --token-file F logs …`) or set STOCKADE_TOKEN_FILE.
    #[arg(long = "token-file", env = "STOCKADE_TOKEN_FILE", value_name = "FILE")]
    pub remote_token_file: Option<PathBuf>,

    /// With a wss:// --remote: PEM file of the CA that signed the daemon's certificate
    /// (default: the system's trusted roots).
    #[arg(long, global = true, env = "STOCKADE_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command: live output on a terminal, else a bounded answer (full output kept on disk).
    ///
    /// The command runs under `/bin/sh -c` in its own session and process group (and cgroup where
    /// available). In the foreground (default) it runs inside this process: when it exits, times
    /// out or is interrupted, whatever it left running is terminated and the answer says so. The
    /// exit status is the command's own (128+N for a signal, 124 for a timeout).
    ///
    /// On a terminal, a foreground run prints the output as it comes (as a shell would), then the
    /// exit code, wall time and where the full output is. Piped, or with `--json`, it prints one
    /// bounded answer at the end.
    ///
    /// With `--bg` the daemon runs it (started on demand): the answer comes after `--yield-ms`
    /// (default 0) with `Process running with session ID sh-N`, and the command keeps running
    /// after this client exits. Follow it with `stockade logs -f sh-N` or `stockade wait sh-N`.
    #[command(after_help = ex::RUN)]
    Run(RunArgs),
    /// Type into a session (its terminal or stdin pipe) and print what it answered.
    ///
    /// Escapes in TEXT: `\n` Enter, `\t` Tab, `\r`, `\\`, `\xNN` one byte (`\x03` Ctrl-C, `\x04`
    /// Ctrl-D), `\u{…}` a character. Prints the output from just before the write, collected for
    /// `--yield-ms`.
    #[command(after_help = ex::SEND)]
    Send(crate::cmd::send::SendArgs),
    /// Change the terminal size of a PTY session (its foreground program gets SIGWINCH).
    #[command(after_help = ex::RESIZE)]
    Resize(crate::cmd::send::ResizeArgs),
    /// Connect this terminal to a PTY session: type into it, see it live; Ctrl-] detaches.
    ///
    /// The session keeps running after a detach. Needs a terminal on stdin; from a script use
    /// `send` and `logs -f`.
    #[command(after_help = ex::ATTACH)]
    Attach(crate::cmd::attach::AttachArgs),
    /// List the daemon's sessions: state or exit, pid, output size, age, command.
    ///
    /// By default: every running session and the 20 newest finished ones; `-a` (or `--json`)
    /// lists all.
    #[command(after_help = ex::PS)]
    Ps(PsArgs),
    /// Print a session's output from the daemon; `-f` follows it until the session ends.
    ///
    /// Without `--tail`/`--head`, prints the whole log from `--after` (default 0), one bounded
    /// answer at a time. `--raw` writes the exact bytes of the spool (for piping). For a session
    /// the daemon does not know (a foreground `run`), the log is read from the state directory.
    ///
    /// With `-f`, the last line (on stderr) says how the session ended, and the exit status is
    /// the session's own (128+N for a signal, 124 for a timeout), as `wait` gives it.
    #[command(after_help = ex::LOGS)]
    Logs(LogsArgs),
    /// Wait until sessions end; the exit status is the session's own.
    ///
    /// Prints one line per session as it ends (`sh-3 exited 3 after 4.2 s`). The exit status is
    /// that of the first session (in the order given) that did not exit 0 — 128+N for a signal,
    /// 124 for a timeout, 137 when killed — else 0. With `--timeout`, sessions still running
    /// then are left running and the status is 124.
    #[command(after_help = ex::WAIT)]
    Wait(crate::cmd::wait::WaitArgs),
    /// Terminate sessions' whole process trees and report whether anything survived.
    ///
    /// Sends the signal (default SIGTERM) to every process of each session, waits `--grace-ms`,
    /// sends SIGKILL to what is left, then verifies. Exit status 1 when a process survived, 2
    /// when an id was unknown.
    #[command(after_help = ex::KILL)]
    Kill(KillArgs),
    /// Start a session again: same command, working directory, environment and options.
    ///
    /// The new session gets a new id and runs in the background; the old one keeps its output.
    /// A session still running is refused unless `--kill` is given (it is then terminated
    /// first). Sessions a previous daemon ran cannot be restarted (their environment was not
    /// kept).
    #[command(after_help = ex::RESTART)]
    Restart(crate::cmd::restart::RestartArgs),
    /// Terminate sessions if they are running, delete their spools and drop their records.
    #[command(after_help = ex::FORGET)]
    Forget(ForgetArgs),
    /// Forget every finished session (`--all`: running ones too, after terminating them).
    #[command(after_help = ex::CLEANUP)]
    Cleanup(CleanupArgs),
    /// The daemon's memory and output accounting (RSS, hot tails, spooled and dropped bytes).
    #[command(after_help = ex::STATS)]
    Stats(StatsArgs),
    /// Read a session's output log: by cursor, its tail, its head, or head+tail.
    ///
    /// TARGET is a session id (`sh-3`), a session directory or a spool file. Every byte the
    /// command printed is on disk, so nothing is lost to a slow reader.
    #[command(after_help = ex::READ)]
    Read(ReadArgs),
    /// Search a session's full output with a regular expression (ripgrep's engine).
    ///
    /// Asks the running daemon when it knows the session; otherwise searches the log in the
    /// state directory.
    #[command(after_help = ex::GREP)]
    Grep(GrepArgs),
    /// Say which process containment is active on this machine, and why.
    #[command(after_help = ex::DOCTOR)]
    Doctor(DoctorArgs),
    /// Run or control the daemon that keeps background sessions alive between clients.
    ///
    /// `stockade daemon` (or `stockade daemon run`) serves in the foreground; client commands
    /// start it on demand unless `--no-autostart` is given. There is one daemon per state
    /// directory; its socket is $STOCKADE_HOME/stockade.sock and an auto-started daemon logs to
    /// $STOCKADE_HOME/daemon.log.
    #[command(after_help = ex::DAEMON)]
    Daemon(DaemonArgs),
    /// Measure Stockade: memory growth with output, edge cases, drain and spawn speed.
    #[command(after_help = ex::BENCH)]
    Bench(crate::cmd::bench::BenchArgs),
    /// Serve Stockade to an agent over MCP (stdio by default, or streamable HTTP).
    ///
    /// Tools: exec_command, write_stdin, read_output, grep_output, kill_session, list_sessions.
    /// They use the daemon of --home (started on demand), so sessions survive restarts of the
    /// agent; --embedded runs a private daemon whose sessions end with this server. Answers are
    /// text only (what agents' models read); --structured adds structuredContent for programs.
    ///
    /// Over HTTP every request needs `Authorization: Bearer <token>`: without --token-file a
    /// token is generated into $STOCKADE_HOME/mcp-token (0600) and its path printed. Browser
    /// requests are refused unless their origin is given with --allow-origin.
    #[command(after_help = ex::MCP)]
    Mcp(crate::cmd::mcp::McpArgs),
    /// Recurring runs kept by the daemon: add, list, run, rm, pause, resume, runs.
    ///
    /// A schedule fires ordinary background sessions on an interval (`--every 30s`) or a cron
    /// expression; a fire while the previous run is still active is skipped and counted.
    #[command(after_help = ex::SCHEDULE)]
    Schedule(crate::cmd::schedule::ScheduleArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = ex::COMPLETIONS)]
    Completions(crate::cmd::docs::CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per subcommand into a directory.
    #[command(after_help = ex::MAN)]
    Man(crate::cmd::docs::ManArgs),
}

/// `stockade daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// What to do (default: `run`).
    #[command(subcommand)]
    pub action: Option<DaemonAction>,
}

/// `stockade daemon <action>`.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process; boxing buys nothing")]
pub enum DaemonAction {
    /// Serve JSON-RPC on the Unix socket in the foreground until SIGTERM/SIGINT or `daemon stop`.
    ///
    /// With `--ws` it also serves remote clients (`stockade --remote …`) and orchestrators'
    /// probes (see docs/deploy.md). As a container's PID 1 it also reaps every orphan (Linux),
    /// e.g. `docker run IMAGE stockade daemon run`.
    #[command(after_help = ex::DAEMON_RUN)]
    Run(Box<DaemonRunArgs>),
    /// Start the daemon in the background (if none is running) and wait until it answers.
    #[command(after_help = ex::DAEMON_START)]
    Start(DaemonCtlArgs),
    /// Ask the daemon to terminate every session and exit; wait until it is gone. Says which
    /// sessions it terminated: `Daemon stopped (pid 7); terminated 2 running sessions: sh-3, sh-4`.
    #[command(after_help = ex::DAEMON_STOP)]
    Stop(DaemonCtlArgs),
    /// Say whether a daemon is running: pid, socket, version, sessions. Exit status 1 if not.
    #[command(after_help = ex::DAEMON_STATUS)]
    Status(DaemonCtlArgs),
}

/// `stockade daemon start|stop|status`.
#[derive(Debug, Args)]
pub struct DaemonCtlArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `stockade daemon run`: how the daemon is set up.
#[derive(Debug, Clone, Default, Args)]
pub struct DaemonRunArgs {
    /// Socket path (default: $STOCKADE_HOME/stockade.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Do not use a cgroup even where one is available.
    #[arg(long)]
    pub no_cgroup: bool,
    /// Grace between SIGTERM and SIGKILL when terminating a tree, in milliseconds [default: 2000].
    #[arg(long, value_name = "MS")]
    pub grace_ms: Option<u64>,
    /// Most sessions running at once [default: what the open-file and process limits allow, at
    /// least 1024]. The daemon raises its open-file limit to the hard limit at start and counts
    /// 8 descriptors per running session.
    #[arg(long, value_name = "N")]
    pub max_running: Option<usize>,
    /// Most finished sessions kept; the oldest finished are forgotten first [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_finished: Option<usize>,
    /// Most bytes the hot tails of running sessions may hold together; a hot tail holds bytes only
    /// after its spool stopped (disk cap or disk full) [default: 512MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub hot_tail_budget: Option<u64>,
    /// Default hot-tail size per session: the newest bytes kept in memory once the spool stops
    /// (disk cap or disk full); until then output goes only to the spool [default: 1MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_usize)]
    pub retained_cap: Option<usize>,
    /// Default disk cap per session [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub disk_cap: Option<u64>,
    /// Largest disk cap a session may ask for [default: 16GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub max_disk_cap: Option<u64>,
    /// Most bytes all kept spools may hold; new runs are refused beyond it [default: 64GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub disk_budget: Option<u64>,
    /// Also serve the same JSON-RPC over WebSocket on ADDR (e.g. 127.0.0.1:8765) for remote
    /// clients (`stockade --remote`); every connection must send `Authorization: Bearer <token>`.
    /// The same port answers GET /healthz, /readyz (no token) and /metrics (token). A
    /// non-loopback ADDR needs --tls-cert/--tls-key (wss://) or --insecure-plaintext.
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<std::net::SocketAddr>,
    /// The file holding the WebSocket token (mode 0600 or stricter, not empty); also asked of
    /// scrapes on a non-loopback --metrics address.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM) for the WebSocket door (clients then use wss://) and the
    /// --metrics address (https://).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve the WebSocket door (or --metrics) without TLS on a non-loopback address (the token
    /// and all output cross the network in clear: only inside a network you trust, e.g. a pod's
    /// own).
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Also serve GET /metrics, /healthz and /readyz on ADDR, apart from the door (e.g.
    /// 127.0.0.1:9433 for a scraper in the same pod). On a loopback ADDR /metrics needs no token;
    /// otherwise it needs --token-file's token and TLS or --insecure-plaintext, as the door.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Delete finished sessions (record and spool) this long after they ended: a number with a
    /// unit, s, m, h or d (e.g. 12h, 7d) [default: 7d].
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub retention: Option<std::time::Duration>,
    /// How often the retention janitor sweeps, in milliseconds (it also sweeps at start-up)
    /// [default: 3600000]. Tests shorten it.
    #[arg(long, value_name = "MS", hide = true)]
    pub sweep_interval_ms: Option<u64>,
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

/// Output bounds shared by `run` and `read`.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Most bytes of output to show (e.g. 50KiB, 2000, 1MiB).
    #[arg(long, value_name = "SIZE", default_value_t = stockade_proto::DEFAULT_MAX_BYTES, value_parser = parse_size_usize)]
    pub max_bytes: usize,
    /// Most lines of output to show.
    #[arg(long, value_name = "N", default_value_t = stockade_proto::DEFAULT_MAX_LINES)]
    pub max_lines: usize,
}

/// `stockade run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The command: one shell string (`'ls | wc -l'`), or words after `--` (quoted for the shell).
    #[arg(required = true, num_args = 1.., value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<String>,
    /// The shell that runs the command.
    #[arg(long, value_name = "PATH", default_value = "/bin/sh")]
    pub shell: PathBuf,
    /// Run the shell as a login shell (`-lc`).
    #[arg(long)]
    pub login: bool,
    /// Working directory.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Extra environment variable (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Terminate the whole process tree after this many milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Grace between SIGTERM and SIGKILL when terminating, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = stockade_proto::DEFAULT_GRACE_MS)]
    pub grace_ms: u64,
    /// Which part of the output to show when it is too long.
    #[arg(long, value_enum, default_value = "tail")]
    pub direction: Direction,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// `pipe`: Stockade reads the output; `file`: the command writes straight into the spool.
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
    #[arg(long, value_name = "MS", requires = "bg")]
    pub yield_ms: Option<u64>,
    /// With `--bg`: a dedup key; if a running session has it, answer with that one instead of
    /// starting a second copy.
    #[arg(long, value_name = "KEY", requires = "bg")]
    pub source: Option<String>,
    /// Run on a pseudo-terminal (through the daemon): for REPLs, shells and full-screen
    /// programs. With `--bg`, type into it with `send` or `attach`.
    #[arg(long, conflicts_with_all = ["no_cgroup", "stdin"])]
    pub pty: bool,
    /// With `--pty`: terminal rows.
    #[arg(long, value_name = "N", default_value_t = 24, requires = "pty")]
    pub rows: u16,
    /// With `--pty`: terminal columns.
    #[arg(long, value_name = "N", default_value_t = 80, requires = "pty")]
    pub cols: u16,
    /// With `--bg`: `pipe` gives the command a stdin that `send` writes to (`--close-stdin`
    /// ends it); default `/dev/null`.
    #[arg(long, value_enum, value_name = "null|pipe", requires = "bg")]
    pub stdin: Option<StdinArg>,
    /// Print the structured result as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `stockade ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Every session the daemon knows, not only the running ones and the newest finished.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Only sessions in this state (repeatable, or comma-separated).
    #[arg(long, value_enum, value_name = "STATE", value_delimiter = ',')]
    pub state: Vec<StateFilter>,
    /// Only sessions started with this `--source` key (a schedule's is `schedule:NAME`).
    #[arg(long, value_name = "KEY")]
    pub source: Option<String>,
    /// Print only the ids, one a line (for `stockade kill $(stockade ps -q)`).
    #[arg(short = 'q', long, conflicts_with = "json")]
    pub quiet: bool,
    /// Print the sessions as JSON (the `list` result, filtered).
    #[arg(long)]
    pub json: bool,
}

/// `ps --state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateFilter {
    /// Still running.
    Running,
    /// Ended, however it ended.
    Done,
    /// Exited with status 0.
    Ok,
    /// Exited non-zero, died of a signal, or failed to start.
    Failed,
    /// Terminated by Stockade (kill, timeout, shutdown, disk cap).
    Killed,
}

/// `stockade logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The session id (`sh-3`).
    pub id: String,
    /// Keep printing new output as it arrives, until the session ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Start after this byte offset (a cursor from an earlier answer).
    #[arg(long, value_name = "CURSOR", conflicts_with_all = ["tail", "head"])]
    pub after: Option<u64>,
    /// Only the last N lines (then follow, with `-f`).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "head")]
    pub tail: Option<usize>,
    /// Only the first N lines.
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    pub head: Option<usize>,
    /// Only this stream.
    #[arg(long, value_enum)]
    pub stream: Option<StreamArg>,
    /// Write exactly the bytes of the log (no notice, no lossy conversion), for piping.
    #[arg(long, conflicts_with_all = ["json", "stream", "tail", "head"])]
    pub raw: bool,
    /// Print each answer as JSON (one object per line when several).
    #[arg(long)]
    pub json: bool,
}

/// `stockade kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// The session ids (`sh-3 sh-4`).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// The first signal: TERM (default), INT, HUP, KILL, … or a number.
    #[arg(short = 's', long, value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// Grace between the first signal and SIGKILL, in milliseconds (default 2000).
    #[arg(long, value_name = "MS")]
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

/// `stockade stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the accounting as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--stdin`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StdinArg {
    /// `/dev/null`.
    Null,
    /// A pipe fed by `stockade send`.
    Pipe,
}

/// `--stream`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StreamArg {
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
}

impl From<StreamArg> for Stream {
    fn from(s: StreamArg) -> Stream {
        match s {
            StreamArg::Stdout => Stream::Stdout,
            StreamArg::Stderr => Stream::Stderr,
        }
    }
}

/// `--mode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// From `--after` onward.
    Delta,
    /// The end.
    Tail,
    /// The start.
    Head,
    /// Both ends.
    Middle,
}

impl From<ModeArg> for ReadMode {
    fn from(m: ModeArg) -> ReadMode {
        match m {
            ModeArg::Delta => ReadMode::Delta,
            ModeArg::Tail => ReadMode::Tail,
            ModeArg::Head => ReadMode::Head,
            ModeArg::Middle => ReadMode::Middle,
        }
    }
}

/// `stockade read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// A session id (`sh-3`), a session directory, or a spool file.
    pub target: String,
    /// Show what follows this byte offset (a cursor from an earlier answer).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<u64>,
    /// Which part to show (default: `delta` with --after, else `tail`).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Only this stream.
    #[arg(long, value_enum)]
    pub stream: Option<StreamArg>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Write exactly the bytes of the range (no notice, no lossy conversion), for piping.
    #[arg(long, conflicts_with_all = ["json", "stream"])]
    pub raw: bool,
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `stockade grep`.
#[derive(Debug, Args)]
pub struct GrepArgs {
    /// A session id (`sh-3`), a session directory, or a spool file.
    pub target: String,
    /// The regular expression (Rust regex syntax, as ripgrep).
    pub pattern: String,
    /// Lines of context before and after each match.
    #[arg(short = 'C', long, value_name = "N", default_value_t = 0)]
    pub context: usize,
    /// Stop after this many matching lines.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub max_matches: usize,
    /// Case-insensitive.
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `stockade doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every subcommand, at every depth, ends its help with examples, one a line.
    #[test]
    fn every_subcommand_has_examples() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let path = format!("{path} {}", sub.get_name());
                let examples = sub.get_after_help().map(ToString::to_string).unwrap_or_default();
                let lines = examples.lines().filter(|l| l.starts_with("  stockade ")).count();
                if !examples.starts_with("Examples:\n") || lines == 0 {
                    missing.push(path.clone());
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "stockade", &mut missing);
        missing.retain(|p| !p.ends_with(" help"));
        assert!(missing.is_empty(), "no examples: {missing:?}");
    }

    #[test]
    fn background_flags_need_bg_and_json_stays_out_of_the_command() {
        let cli =
            Cli::try_parse_from(["stockade", "run", "--bg", "--yield-ms", "5", "make", "--json"])
                .unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert!(run.bg && run.yield_ms == Some(5));
        assert_eq!(run.command, ["make", "--json"]);
        assert!(Cli::try_parse_from(["stockade", "run", "--yield-ms", "5", "true"]).is_err());
        assert!(Cli::try_parse_from(["stockade", "run", "--source", "k", "true"]).is_err());
        assert!(Cli::try_parse_from(["stockade", "logs", "sh-1", "--raw", "--tail", "3"]).is_err());
        assert!(Cli::try_parse_from(["stockade", "logs", "sh-1", "-f", "--head", "3"]).is_err());
        let cli = Cli::try_parse_from(["stockade", "--no-autostart", "ps"]).unwrap();
        assert!(cli.no_autostart);
    }
}
