//! The command line, declared with clap's derive API: the global options and the subcommands.
//! Each subcommand's own flags live beside its handler in `cmd/`; every `--help` explains them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::cmd::attach::AttachArgs;
use crate::cmd::bench::BenchArgs;
use crate::cmd::daemon::DaemonArgs;
use crate::cmd::docs::{CompletionsArgs, ManArgs};
use crate::cmd::doctor::DoctorArgs;
use crate::cmd::kill::{CleanupArgs, ForgetArgs, KillArgs};
use crate::cmd::logs::LogsArgs;
use crate::cmd::mcp::McpArgs;
use crate::cmd::ps::PsArgs;
use crate::cmd::read::{GrepArgs, ReadArgs};
use crate::cmd::restart::RestartArgs;
use crate::cmd::run::RunArgs;
use crate::cmd::schedule::ScheduleArgs;
use crate::cmd::send::{ResizeArgs, SendArgs};
use crate::cmd::stats::StatsArgs;
use crate::cmd::wait::WaitArgs;
use crate::examples as ex;

/// Stockade runs shell commands for AI coding agents: it keeps every byte they print on disk,
/// shows a bounded, honest view of it, and makes sure nothing they started outlives them.
#[derive(Debug, Parser)]
#[command(name = "stockade", version, propagate_version = true, max_term_width = 100)]
#[command(long_version = crate::global::long_version())]
#[command(next_help_heading = "Global options")]
pub struct Cli {
    /// State directory (spools, session records). Default: $XDG_STATE_HOME/stockade, else
    /// ~/.local/state/stockade.
    #[arg(long, global = true, env = "STOCKADE_HOME", value_name = "DIR")]
    #[arg(value_parser = crate::args::path_parser())]
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
    #[arg(value_parser = crate::args::path_parser())]
    pub remote_token_file: Option<PathBuf>,

    /// With a wss:// --remote: PEM file of the CA that signed the daemon's certificate
    /// (default: the system's trusted roots).
    #[arg(long, global = true, env = "STOCKADE_CA_FILE", value_name = "FILE")]
    #[arg(value_parser = crate::args::path_parser())]
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
    Send(SendArgs),
    /// Change the terminal size of a PTY session (its foreground program gets SIGWINCH).
    #[command(after_help = ex::RESIZE)]
    Resize(ResizeArgs),
    /// Connect this terminal to a PTY session: type into it, see it live; Ctrl-] detaches.
    ///
    /// The session keeps running after a detach. Needs a terminal on stdin; from a script use
    /// `send` and `logs -f`.
    #[command(after_help = ex::ATTACH)]
    Attach(AttachArgs),
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
    Wait(WaitArgs),
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
    Restart(RestartArgs),
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
    Bench(BenchArgs),
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
    Mcp(McpArgs),
    /// Recurring runs kept by the daemon: add, list, run, rm, pause, resume, runs.
    ///
    /// A schedule fires ordinary background sessions on an interval (`--every 30s`) or a cron
    /// expression; a fire while the previous run is still active is skipped and counted.
    #[command(after_help = ex::SCHEDULE)]
    Schedule(ScheduleArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = ex::COMPLETIONS)]
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per subcommand into a directory.
    ///
    /// `--dir` creates the directory. If `man stockade-run` then does not find the pages, add
    /// the directory's parent to MANPATH, e.g. `export MANPATH="$HOME/.local/share/man:"` (the
    /// trailing `:` keeps the system's pages).
    #[command(after_help = ex::MAN)]
    Man(ManArgs),
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
