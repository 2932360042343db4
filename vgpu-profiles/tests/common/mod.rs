//! Helpers shared by the integration tests: reading the verbatim fixture samples.
#![allow(dead_code)]

use std::path::PathBuf;

/// Reads a fixture file under `tests/fixtures/`.
pub fn fixture(relative: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// One fenced sample of a `real-world/*.md` file with the `###` heading above it.
#[derive(Debug)]
pub struct Sample {
    pub heading: String,
    pub text: String,
}

/// Every fenced block of a real-world sample file, with its heading. The fence that opens
/// a block (three or more backticks) closes it only when repeated with the same length, so
/// samples that contain shorter fences stay whole.
pub fn samples(relative: &str) -> Vec<Sample> {
    let text = fixture(relative);
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        if let Some((fence, body)) = &mut open {
            if line.trim_end() == fence.as_str() {
                out.push(Sample {
                    heading: heading.clone(),
                    text: body.join("\n"),
                });
                open = None;
            } else {
                body.push(line);
            }
            continue;
        }
        if let Some(h) = line.strip_prefix("### ") {
            heading = h.to_owned();
        } else if line.starts_with("```") {
            let fence: String = line.chars().take_while(|&c| c == '`').collect();
            open = Some((fence, Vec::new()));
        }
    }
    assert!(open.is_none(), "unclosed fence in {relative}");
    out
}
