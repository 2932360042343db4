//! Standard output that a closed pipe ends quietly.
//!
//! Rust ignores SIGPIPE, so `println!` panics when the reader has gone (`vgpuctl profiles |
//! head`). A reader that stops reading is not an error of ours: the command's output is simply
//! no longer wanted, so the process exits with status 0 and prints nothing.

use std::fmt;
use std::io::{self, Write};

/// Writes to standard output; exits quietly when the reader has closed the pipe. Other write
/// errors (a full disk behind a redirect) end the process with status 1 and one line.
pub fn write_stdout(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(error) = stdout.write_fmt(args) {
        if error.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        // Nothing can be printed to stdout any more; stderr is the only place left to say so.
        let _ = writeln!(io::stderr(), "vgpuctl: cannot write the output: {error}");
        std::process::exit(1);
    }
}

/// `print!` that ends quietly on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints `value` as pretty JSON, one document.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), crate::failure::Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| crate::failure::Failure::new(format!("cannot encode JSON: {e}"), 1))?;
    outln!("{text}");
    Ok(())
}
