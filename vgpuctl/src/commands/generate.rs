//! `vgpuctl generate completions|man --dir DIR` (hidden; used by packaging). Needs no service.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Cli, GenerateWhat};
use crate::failure::Failure;

/// Writes the shell completions or the man pages into `dir`.
pub fn generate(what: &GenerateWhat, dir: &Path) -> Result<(), Failure> {
    let io =
        |e: std::io::Error| Failure::new(format!("cannot write into {}: {e}", dir.display()), 1);
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut command = Cli::command();
    match what {
        GenerateWhat::Completions => {
            use clap_complete::Shell;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut command, "vgpuctl", dir).map_err(io)?;
            }
        }
        GenerateWhat::Man => {
            command.build();
            write_man(&command, "vgpuctl", dir).map_err(io)?;
            for sub in command
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            {
                let name = format!("vgpuctl-{}", sub.get_name());
                write_man(sub, &name, dir).map_err(io)?;
            }
        }
    }
    Ok(())
}

/// One man page, `DIR/NAME.1`.
fn write_man(command: &clap::Command, name: &str, dir: &Path) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    clap_mangen::Man::new(command.clone())
        .title(name.to_ascii_uppercase())
        .render(&mut buffer)?;
    std::fs::write(dir.join(format!("{name}.1")), buffer)
}
