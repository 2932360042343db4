//! `vgpuctl apply` and `vgpuctl assert`: a desired-state file sent to `Manager.StartApply`.
//!
//! `apply` asks for the plan first (`dry-run`) and prints it, then applies (unless
//! `--dry-run`); `assert` exits 0 when the host matches and non-zero with the difference.

use std::collections::HashMap;
use std::io::Read;

use dbus_api::names::option;
use dbus_api::{ClientError, ErrorKind};
use zbus::{Connection, Variant};

use crate::{failure, jobs, Failure};

/// What to do with the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Print the plan only.
    DryRun,
    /// Print the plan, then apply it.
    Apply,
    /// Exit 0 when the host matches.
    Assert,
}

/// The file's text and its name in messages (`-` is standard input).
fn read_document(file: &str) -> Result<(String, String), Failure> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| failure(ErrorKind::InvalidArgs, format!("reading stdin: {error}")))?;
        return Ok(("<stdin>".to_owned(), text));
    }
    text = std::fs::read_to_string(file)
        .map_err(|error| failure(ErrorKind::NotFound, format!("reading {file}: {error}")))?;
    Ok((file.to_owned(), text))
}

/// Runs `apply`/`assert` of `file` (configuration `config`, empty for TOML) in `mode`.
pub async fn run(
    connection: &Connection,
    mut base: HashMap<&'static str, Variant<'static>>,
    file: &str,
    config: &str,
    force: bool,
    mode: Mode,
) -> Result<(), Failure> {
    let (name, text) = read_document(file)?;
    base.insert(option::FILE_NAME, Variant::from(name));
    if force {
        base.insert(option::FORCE, Variant::from(true));
    }
    let first = match mode {
        Mode::Assert => option::ASSERT,
        Mode::DryRun | Mode::Apply => option::DRY_RUN,
    };
    let mut options = base.clone();
    options.insert(first, Variant::from(true));
    let planned = start_and_wait(connection, &text, config, options).await?;
    if !planned.success {
        return Err(planned.failure());
    }
    outln!("{}", planned.message.trim_end());
    if mode != Mode::Apply || planned.message.starts_with("no changes") {
        return Ok(());
    }
    let applied = start_and_wait(connection, &text, config, base).await?;
    if !applied.success {
        return Err(applied.failure());
    }
    if let Some(last) = applied.message.lines().last() {
        outln!("{last}");
    }
    Ok(())
}

async fn start_and_wait(
    connection: &Connection,
    text: &str,
    config: &str,
    options: HashMap<&'static str, Variant<'static>>,
) -> Result<jobs::JobEnd, Failure> {
    let manager = crate::manager(connection).await?;
    // Subscribed before the call: the job may end before its path comes back.
    let watch = jobs::JobWatch::subscribe(connection).await?;
    let mut interrupts = jobs::Interrupts::catch()?;
    let job = manager
        .start_apply(text, "toml", config, options)
        .await
        .map_err(ClientError::from)?;
    let waited = jobs::wait_or_cancel(
        connection,
        watch,
        &job,
        &mut interrupts,
        "what it had changed was rolled back",
    )
    .await?;
    Ok(waited.end)
}
