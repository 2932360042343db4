//! The command line libvirt gives a qemu hook: `<domain name> <operation> <sub-operation>
//! <extra>` (libvirt docs/hooks.rst). The domain XML comes on stdin and is read elsewhere.

use std::ffi::OsString;

/// The operations of the qemu hook this program acts on; everything else is [`Operation::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `prepare begin`: before libvirt labels resources; we claim the vGPUs here.
    Prepare,
    /// `release end`: after libvirt released everything; we release the claims.
    Release,
    /// `reconnect begin`: libvirtd restarted and reattaches to a running guest. A failure here
    /// kills the guest, so this path never fails.
    Reconnect,
    /// `migrate begin`: incoming migration; an XML filter.
    Migrate,
    /// `restore begin`: restore of a saved image; an XML filter.
    Restore,
    /// Any other operation or phase (`start begin`, `started begin`, `stopped end`, `attach`,
    /// a `prepare end` should libvirt ever send one, ...): nothing to do.
    Other,
}

impl Operation {
    /// Classifies libvirt's operation and sub-operation. Only the phase the hook acts in counts:
    /// libvirt documents `begin` for prepare/reconnect/migrate/restore and `end` for release.
    pub fn classify(operation: &str, sub_operation: &str) -> Self {
        match (operation, sub_operation) {
            ("prepare", "begin") => Operation::Prepare,
            ("release", "end") => Operation::Release,
            ("reconnect", "begin") => Operation::Reconnect,
            ("migrate", "begin") => Operation::Migrate,
            ("restore", "begin") => Operation::Restore,
            _ => Operation::Other,
        }
    }

    /// Whether the operation needs the domain XML at all.
    pub fn reads_domain_xml(self) -> bool {
        !matches!(self, Operation::Other)
    }

    /// Whether libvirt treats stdout as the (possibly rewritten) domain XML.
    pub fn is_xml_filter(self) -> bool {
        matches!(self, Operation::Migrate | Operation::Restore)
    }

    /// The words libvirt used, for messages.
    pub fn label(self) -> &'static str {
        match self {
            Operation::Prepare => "prepare",
            Operation::Release => "release",
            Operation::Reconnect => "reconnect",
            Operation::Migrate => "migrate",
            Operation::Restore => "restore",
            Operation::Other => "other",
        }
    }
}

/// One call of the hook as libvirt made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookInvocation {
    /// `$1`: the guest name (`-` for daemon-level calls, which the qemu hook does not get).
    pub domain_name: String,
    /// What to do.
    pub operation: Operation,
    /// `$4`: extra argument (`-` when none; the shutoff reason for `release end` since 10.5.0).
    pub extra: String,
}

/// The command line is not what libvirt passes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvocationError {
    /// Fewer than the three arguments libvirt always gives.
    #[error(
        "expected the arguments libvirt passes a qemu hook: <domain name> <operation> <sub-operation> [<extra>], got {0} argument(s)"
    )]
    MissingArguments(usize),
    /// An argument is not UTF-8 (libvirt domain names and operations always are).
    #[error("argument {position} is not valid UTF-8")]
    NotUtf8 {
        /// 1-based position after the program name.
        position: usize,
    },
}

impl HookInvocation {
    /// Parses the arguments after the program name. Arguments past the fourth are ignored, as
    /// libvirt may add more in later versions.
    pub fn from_args<I>(args: I) -> Result<Self, InvocationError>
    where
        I: IntoIterator<Item = OsString>,
    {
        let mut words = Vec::with_capacity(4);
        for (index, arg) in args.into_iter().take(4).enumerate() {
            let word = arg.into_string().map_err(|_| InvocationError::NotUtf8 {
                position: index + 1,
            })?;
            words.push(word);
        }
        if words.len() < 3 {
            return Err(InvocationError::MissingArguments(words.len()));
        }
        let extra = words.get(3).cloned().unwrap_or_else(|| "-".to_owned());
        Ok(Self {
            operation: Operation::classify(&words[1], &words[2]),
            domain_name: std::mem::take(&mut words[0]),
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HookInvocation, InvocationError> {
        HookInvocation::from_args(args.iter().map(OsString::from))
    }

    #[test]
    fn classifies_the_libvirt_9_call_order() {
        let seen = [
            ("prepare", "begin", Operation::Prepare),
            ("start", "begin", Operation::Other),
            ("started", "begin", Operation::Other),
            ("stopped", "end", Operation::Other),
            ("release", "end", Operation::Release),
            ("reconnect", "begin", Operation::Reconnect),
            ("migrate", "begin", Operation::Migrate),
            ("restore", "begin", Operation::Restore),
            ("attach", "begin", Operation::Other),
            ("prepare", "end", Operation::Other),
        ];
        for (operation, sub, expected) in seen {
            let call = parse(&["vm1", operation, sub, "-"]).unwrap();
            assert_eq!(call.operation, expected, "{operation} {sub}");
            assert_eq!(call.domain_name, "vm1");
        }
    }

    #[test]
    fn keeps_the_shutoff_reason_and_tolerates_a_missing_extra() {
        let call = parse(&["vm1", "release", "end", "destroyed"]).unwrap();
        assert_eq!(call.extra, "destroyed");
        let call = parse(&["vm1", "release", "end"]).unwrap();
        assert_eq!(call.extra, "-");
        let call = parse(&["vm1", "release", "end", "-", "future"]).unwrap();
        assert_eq!(call.operation, Operation::Release);
    }

    #[test]
    fn refuses_too_few_arguments() {
        assert_eq!(
            parse(&["vm1", "prepare"]),
            Err(InvocationError::MissingArguments(2))
        );
        assert_eq!(parse(&[]), Err(InvocationError::MissingArguments(0)));
    }

    #[test]
    fn refuses_non_utf8_arguments() {
        use std::os::unix::ffi::OsStringExt;
        let args = vec![
            OsString::from("vm1"),
            OsString::from_vec(vec![0xff, 0xfe]),
            OsString::from("begin"),
        ];
        assert_eq!(
            HookInvocation::from_args(args),
            Err(InvocationError::NotUtf8 { position: 2 })
        );
    }
}
