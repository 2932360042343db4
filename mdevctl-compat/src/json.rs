//! A JSON value that keeps its keys in insertion order, printed exactly as mdevctl 1.4 prints
//! its listings (serde_json's pretty printer with `preserve_order`: two-space indent,
//! `"key": value`, `[]` for an empty array, no trailing newline).
//!
//! The workspace's serde_json sorts object keys (no `preserve_order`, and turning that feature
//! on would change every crate that shares it), while mdevctl prints `mdev_type`, `start`,
//! `attrs` and `available_instances`, `device_api`, `name`, `description` in that order.

/// An ordered JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// A string.
    Str(String),
    /// An unsigned number.
    Num(u64),
    /// An array.
    Arr(Vec<Json>),
    /// An object, keys in the order given.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An object of one key.
    pub fn single(key: impl Into<String>, value: Json) -> Json {
        Json::Obj(vec![(key.into(), value)])
    }

    /// The pretty-printed text, without a trailing newline.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Json::Str(text) => out.push_str(&quote(text)),
            Json::Num(number) => out.push_str(&number.to_string()),
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Obj(fields) if fields.is_empty() => out.push_str("{}"),
            Json::Arr(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    out.push_str(if index == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    item.write(out, depth + 1);
                }
                out.push('\n');
                indent(out, depth);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (index, (key, value)) in fields.iter().enumerate() {
                    out.push_str(if index == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    out.push_str(&quote(key));
                    out.push_str(": ");
                    value.write(out, depth + 1);
                }
                out.push('\n');
                indent(out, depth);
                out.push('}');
            }
        }
    }
}

/// A JSON string literal with serde_json's escaping (the same bytes mdevctl writes).
fn quote(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_values_print_like_serde_json_pretty_with_keys_in_insertion_order() {
        let value = Json::Arr(vec![Json::Obj(vec![
            ("b".into(), Json::Str("x\"y".into())),
            ("a".into(), Json::Arr(vec![])),
            ("c".into(), Json::Arr(vec![Json::single("k", Json::Num(4))])),
        ])]);
        assert_eq!(
            value.pretty(),
            "[\n  {\n    \"b\": \"x\\\"y\",\n    \"a\": [],\n    \"c\": [\n      {\n        \"k\": 4\n      }\n    ]\n  }\n]"
        );
    }

    #[test]
    fn empty_containers_are_printed_inline() {
        assert_eq!(Json::Arr(vec![]).pretty(), "[]");
        assert_eq!(Json::Obj(vec![]).pretty(), "{}");
    }
}
