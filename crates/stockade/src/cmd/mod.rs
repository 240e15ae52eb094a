//! One file per subcommand: its flags (clap `Args`) and the handler that translates them into
//! engine calls. `cli.rs` names each subcommand's flags; `dispatch` calls its handler.

pub mod attach;
pub mod bench;
pub mod daemon;
pub mod daemon_ctl;
pub mod daemon_run;
pub mod docs;
pub mod doctor;
pub mod kill;
pub mod logs;
pub mod mcp;
pub mod ps;
pub mod read;
pub mod restart;
pub mod run;
mod run_pty;
pub mod schedule;
mod schedule_table;
pub mod send;
pub mod stats;
pub mod wait;

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::global::Global;

/// Run the chosen subcommand.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let home = cli.home.clone();
    let global = Global {
        home: cli.home,
        no_autostart: cli.no_autostart,
        remote: cli.remote.filter(|u| !u.is_empty()),
        remote_token_file: cli.remote_token_file,
        ca_file: cli.ca_file,
    };
    match cli.command {
        Command::Run(args) => run::run(&global, args),
        Command::Send(args) => send::send(&global, args),
        Command::Resize(args) => send::resize(&global, args),
        Command::Attach(args) => attach::attach(&global, args),
        Command::Ps(args) => ps::ps(&global, args),
        Command::Logs(args) => logs::logs(&global, args),
        Command::Wait(args) => wait::wait(&global, args),
        Command::Kill(args) => kill::kill(&global, args),
        Command::Restart(args) => restart::restart(&global, args),
        Command::Forget(args) => kill::forget(&global, args),
        Command::Cleanup(args) => kill::cleanup(&global, args),
        Command::Stats(args) => stats::stats(&global, args),
        // A remote daemon's session is read through it, never from this machine's files.
        Command::Read(args) if global.remote.is_some() => logs::read_remote(&global, args),
        Command::Read(args) => read::read(home, args),
        Command::Grep(args) => read::grep(&global, args),
        Command::Doctor(args) => {
            global.refuse_remote(
                "doctor",
                "run it on the remote machine, or `stockade --remote URL daemon status` for the remote daemon's containment",
            )?;
            doctor::doctor(home, args)
        }
        Command::Bench(args) => {
            global.refuse_remote("bench", "run it on the machine you want to measure")?;
            bench::bench(home, args)
        }
        Command::Mcp(args) => mcp::mcp(&global, args),
        Command::Schedule(args) => schedule::schedule(&global, args),
        // The generators read the whole declaration; handing it in keeps `docs.rs` from
        // depending on `cli.rs`, which names `docs.rs`'s flags.
        Command::Completions(args) => docs::completions(args, Cli::command()),
        Command::Man(args) => docs::man(args, Cli::command()),
        Command::Daemon(args) => daemon::daemon(&global, home, args),
    }
}
