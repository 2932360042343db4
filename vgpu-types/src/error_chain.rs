//! One error and its causes on one line, for logs, D-Bus error messages and CLI output.

/// `error: cause: cause` on one line: the error's message followed by each of its sources.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|inner| inner as _)
        }
    }

    #[test]
    fn the_chain_joins_every_cause_in_order_with_colons() {
        let error = Layer(
            "creating 0000:41:00.0",
            Some(Box::new(Layer(
                "writing create",
                Some(Box::new(Layer("EBUSY", None))),
            ))),
        );
        assert_eq!(
            error_chain(&error),
            "creating 0000:41:00.0: writing create: EBUSY"
        );
    }

    #[test]
    fn an_error_without_a_source_is_its_own_message() {
        assert_eq!(
            error_chain(&Layer("no such profile a100-4c", None)),
            "no such profile a100-4c"
        );
    }
}
