//! `stockade completions` and `stockade man`: shell completion scripts and man pages generated
//! from the same clap declaration as `--help` (`clap_complete`, `clap_mangen`), so they never
//! drift from the real flags.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

use crate::out;

/// `stockade completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// `stockade man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `stockade.1` and one page per subcommand (`stockade-run.1`, …) into this directory
    /// instead of printing the main page.
    #[arg(long, value_name = "DIR", value_parser = crate::args::path_parser())]
    pub dir: Option<PathBuf>,
}

/// The completion script of `cmd` (the whole command line) for `args.shell`.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "stockade", &mut script);
    out::print_bytes(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// The man page(s) of `cmd` (the whole command line).
pub fn man(args: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| {
                format!("cannot create the directory {} (--dir)", dir.display())
            })?;
            clap_mangen::generate_to(cmd, &dir).with_context(|| {
                format!("cannot write the man pages into {} (--dir)", dir.display())
            })?;
            out::print(&format!("Wrote the man pages into {}\n", dir.display()))?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            out::print_bytes(&page)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
