//! `vgpuctl apply` and `vgpuctl assert`: a desired-state file sent to `Manager.StartApply`.
//!
//! `apply` asks for the plan first (`dry-run`) and prints it, then applies (unless
//! `--dry-run`); `assert` exits 0 when the host matches and non-zero with the difference, one
//! line per change as `apply --dry-run` prints the plan.

use std::io::Read;

use dbus_api::options::ApplyOptions;
use dbus_api::{ClientError, ErrorKind};

use crate::failure::{failure, Failure};
use crate::jobs;
use crate::service::{manager, Auth, Sent, Session};

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

/// Which file, configuration and format `apply`/`assert` send.
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    file: &'a str,
    config: &'a str,
    format: &'a str,
}

impl<'a> Document<'a> {
    /// `file` (`-`: standard input), configuration `config` (empty: the file's only one),
    /// `format` as the service names it (`toml`, `nvidia-vgpu-dm`, `auto`).
    pub fn new(file: &'a str, config: &'a str, format: &'a str) -> Self {
        Self {
            file,
            config,
            format,
        }
    }
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

/// The options of the `StartApply` calls of `mode`: the first (`first`) asks for the plan
/// (`dry-run`, or `assert`), the second applies it.
pub fn options(auth: Auth, file_name: &str, force: bool, mode: Mode, first: bool) -> ApplyOptions {
    ApplyOptions {
        dry_run: (first && mode != Mode::Assert).then_some(true),
        assert: (first && mode == Mode::Assert).then_some(true),
        force: force.then_some(true),
        file_name: Some(file_name.to_owned()),
        no_user_interaction: auth.no_user_interaction(),
    }
}

/// Runs `apply`/`assert` of `document` in `mode`.
pub async fn run(
    session: &Session,
    document: &Document<'_>,
    force: bool,
    mode: Mode,
) -> Result<(), Failure> {
    let (name, text) = read_document(document.file)?;
    let planning = options(session.auth, &name, force, mode, true);
    let planned = start_and_wait(session, &text, document, &planning).await?;
    if !planned.success {
        let failure = planned.failure();
        return Err(match mode {
            Mode::Assert => difference_on_lines(failure),
            Mode::DryRun | Mode::Apply => failure,
        });
    }
    outln!("{}", planned.message.trim_end());
    if mode != Mode::Apply || planned.message.starts_with("no changes") {
        return Ok(());
    }
    let applying = options(session.auth, &name, force, mode, false);
    let applied = start_and_wait(session, &text, document, &applying).await?;
    if !applied.success {
        return Err(applied.failure());
    }
    if let Some(last) = applied.message.lines().last() {
        outln!("{last}");
    }
    Ok(())
}

/// An `assert` that finds a difference fails (`Failed`) with `Failed: the host differs from the
/// desired state:` and the plan, one change per line: the first line stays the message, each
/// change becomes a line of its own (as `apply --dry-run` prints it) instead of being flattened
/// onto the message's. Other failures (a file that does not parse: `InvalidArgs`) keep their
/// one line.
fn difference_on_lines(mut failure: Failure) -> Failure {
    if failure.code != ErrorKind::Failed.exit_code() {
        return failure;
    }
    let mut lines = failure.message.lines();
    let first = lines.next().unwrap_or_default().to_owned();
    failure.detail = lines
        .map(str::trim_end)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect();
    failure.message = first;
    failure
}

async fn start_and_wait(
    session: &Session,
    text: &str,
    document: &Document<'_>,
    options: &ApplyOptions,
) -> Result<jobs::JobEnd, Failure> {
    let connection = &session.connection;
    let manager = manager(connection).await?;
    // Subscribed before the call: the job may end before its path comes back.
    let watch = jobs::JobWatch::subscribe(connection).await?;
    let mut interrupts = jobs::Interrupts::catch()?;
    let sent = Sent::new(options);
    let job = manager
        .start_apply(text, document.format, document.config, sent.proxy())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The difference an assert fails with: the message's first line, then one line per change
    /// exactly as the service rendered the plan; the exit status is the job's.
    #[test]
    fn an_assert_difference_is_one_line_per_change() {
        let failure = failure(
            ErrorKind::Failed,
            "Failed: the host differs from the desired state:\n\
             destroy 4d88 on 0000:3b:00.0 (nvidia-232): not in the file\n\
             create 2 x T4-8Q (nvidia-233) on 0000:3b:00.0: 0 of 2 running\n"
                .into(),
        );
        let failure = difference_on_lines(failure);
        assert_eq!(
            failure.message,
            "Failed: the host differs from the desired state:"
        );
        assert_eq!(
            failure.detail,
            [
                "destroy 4d88 on 0000:3b:00.0 (nvidia-232): not in the file",
                "create 2 x T4-8Q (nvidia-233) on 0000:3b:00.0: 0 of 2 running",
            ]
        );
        assert_eq!(failure.code, ErrorKind::Failed.exit_code());
        assert_eq!(
            failure.render(),
            "vgpuctl: Failed: the host differs from the desired state:\n\
             destroy 4d88 on 0000:3b:00.0 (nvidia-232): not in the file\n\
             create 2 x T4-8Q (nvidia-233) on 0000:3b:00.0: 0 of 2 running\n"
        );
    }

    /// A failure that is not a difference (a file that does not parse, whose parser's message
    /// spans lines) stays one line.
    #[test]
    fn an_assert_failure_that_is_not_a_difference_stays_one_line() {
        let failure = difference_on_lines(failure(
            ErrorKind::InvalidArgs,
            "InvalidArgs: host.toml: TOML parse error at line 6, column 1\n  |\n6 | colour = 1"
                .into(),
        ));
        assert!(failure.detail.is_empty());
        assert_eq!(
            failure.render(),
            "vgpuctl: InvalidArgs: host.toml: TOML parse error at line 6, column 1   | 6 | colour = 1\n"
        );
    }
}
