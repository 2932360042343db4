//! How a command fails: a message for stderr and the exit status (docs/vgpuctl.md).

use dbus_api::{ClientError, ErrorKind};
use vgpu_types::error_chain;

/// Exit status when the service (or the bus) cannot be reached (sysexits' EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// A failure of one command, printed as one line, then its detail lines as they are.
#[derive(Debug)]
pub struct Failure {
    /// What failed (printed on one line after `vgpuctl: `; newlines in it become spaces).
    pub message: String,
    /// The exit status.
    pub code: u8,
    /// Lines printed under the message, each on its own line (`assert`'s difference).
    pub detail: Vec<String>,
}

impl Failure {
    /// A failure with exit status `code` and no detail lines.
    pub fn new(message: String, code: u8) -> Self {
        Self {
            message,
            code,
            detail: Vec::new(),
        }
    }

    /// What main prints on stderr: `vgpuctl: MESSAGE` on one line, then each detail line.
    pub fn render(&self) -> String {
        let mut text = format!("vgpuctl: {}\n", self.message.replace('\n', " "));
        for line in &self.detail {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        let code = match &error {
            ClientError::Service { kind, .. } => kind.exit_code(),
            ClientError::Unavailable { .. } | ClientError::Bus(_) => EXIT_UNAVAILABLE,
            ClientError::Other { .. } => 1,
        };
        Failure::new(error_chain(&error), code)
    }
}

impl From<zbus::Error> for Failure {
    fn from(error: zbus::Error) -> Self {
        Failure::from(ClientError::from(error))
    }
}

/// A failure of `kind`, with its exit status.
pub fn failure(kind: ErrorKind, message: String) -> Failure {
    Failure::new(message, kind.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message is one line whatever it holds; detail lines follow it unchanged.
    #[test]
    fn a_failure_prints_its_message_on_one_line_and_each_detail_line_after_it() {
        let plain = failure(ErrorKind::NotFound, "no instance\nabc".into());
        assert_eq!(plain.render(), "vgpuctl: no instance abc\n");
        let mut detailed = failure(ErrorKind::Failed, "Failed: differs:".into());
        detailed.detail = vec!["create 2 x mtty on mtty".into(), "destroy x".into()];
        assert_eq!(
            detailed.render(),
            "vgpuctl: Failed: differs:\ncreate 2 x mtty on mtty\ndestroy x\n"
        );
    }
}
