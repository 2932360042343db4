//! Instance and domain UUIDs in the one spelling the kernel, the state file and the bus use.

use std::fmt;
use std::str::FromStr;

/// Why a UUID was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    /// Not the 36-character hyphenated `8-4-4-4-12` hex form.
    #[error("{0:?} is not a UUID (expected 8-4-4-4-12 hex digits)")]
    Malformed(String),
}

/// A UUID (an mdev's name, a libvirt domain's id), kept as its 16 bytes.
///
/// Parsing accepts exactly what the kernel's `create` accepts and the service has always
/// accepted: the 36-character hyphenated form in either case. Braced, URN and 32-digit forms
/// are refused, so one device never has two spellings. It prints, and serializes, in lower
/// case; the order is that of the lower-case text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid([u8; 16]);

impl Uuid {
    /// The all-zero UUID.
    pub const NIL: Uuid = Uuid([0; 16]);

    /// Parses the hyphenated form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (either case).
    pub fn parse(text: &str) -> Result<Uuid, UuidError> {
        let malformed = || UuidError::Malformed(text.to_owned());
        let bytes = text.as_bytes();
        if bytes.len() != 36 {
            return Err(malformed());
        }
        let mut value = [0u8; 16];
        let mut nibbles = 0usize;
        for (index, &byte) in bytes.iter().enumerate() {
            let dash = matches!(index, 8 | 13 | 18 | 23);
            if dash {
                if byte != b'-' {
                    return Err(malformed());
                }
                continue;
            }
            let nibble = match byte {
                b'0'..=b'9' => byte - b'0',
                b'a'..=b'f' => byte - b'a' + 10,
                b'A'..=b'F' => byte - b'A' + 10,
                _ => return Err(malformed()),
            };
            value[nibbles / 2] |= if nibbles % 2 == 0 {
                nibble << 4
            } else {
                nibble
            };
            nibbles += 1;
        }
        Ok(Uuid(value))
    }

    /// Parses every spelling the tools around the service accept for one UUID: the hyphenated
    /// form, the 32 digits without hyphens, the hyphenated form in braces (`{…}`) and as a URN
    /// (`urn:uuid:…`, the prefix in either case), digits in either case. mdevctl's command line
    /// and libvirt XML written by hand may carry any of them, so the commands that stand in for
    /// mdevctl and libvirt's hook read such input with this; the service's own names stay the
    /// one hyphenated form [`Uuid::parse`] accepts and [`Display`](fmt::Display) prints.
    pub fn parse_any_spelling(text: &str) -> Result<Uuid, UuidError> {
        let malformed = || UuidError::Malformed(text.to_owned());
        let parsed = if text.len() == 32 && text.is_ascii() {
            // Put the hyphens where the hyphenated form has them; a hyphen already in the
            // digits then lands on a digit's place and is refused there.
            Uuid::parse(&format!(
                "{}-{}-{}-{}-{}",
                &text[..8],
                &text[8..12],
                &text[12..16],
                &text[16..20],
                &text[20..]
            ))
        } else if let Some(inner) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            Uuid::parse(inner)
        } else if let Some(inner) = text
            .get(..9)
            .filter(|prefix| prefix.eq_ignore_ascii_case("urn:uuid:"))
            .and_then(|_| text.get(9..))
        {
            Uuid::parse(inner)
        } else {
            Uuid::parse(text)
        };
        parsed.map_err(|_| malformed())
    }

    /// A UUID from its 16 bytes (big-endian, as printed).
    pub const fn from_bytes(bytes: [u8; 16]) -> Uuid {
        Uuid(bytes)
    }

    /// The 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The 16 bytes, by value.
    pub const fn into_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl FromStr for Uuid {
    type Err = UuidError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::parse(text)
    }
}

impl TryFrom<&str> for Uuid {
    type Error = UuidError;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        Uuid::parse(text)
    }
}

impl TryFrom<String> for Uuid {
    type Error = UuidError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Uuid::parse(&text)
    }
}

impl From<Uuid> for String {
    fn from(uuid: Uuid) -> String {
        uuid.to_string()
    }
}

impl fmt::Display for Uuid {
    /// `83b8f4f2-509f-382f-3c1e-e6bfe0fa1001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 36];
        let mut at = 0;
        for (index, byte) in self.0.iter().enumerate() {
            if matches!(index, 4 | 6 | 8 | 10) {
                text[at] = b'-';
                at += 1;
            }
            text[at] = HEX[usize::from(byte >> 4)];
            text[at + 1] = HEX[usize::from(byte & 0xf)];
            at += 2;
        }
        // Every byte written above is ASCII.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl serde::Serialize for Uuid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Uuid {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Uuid::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

    #[test]
    fn parses_either_case_and_prints_lower_case() {
        let upper = Uuid::parse(&TEXT.to_ascii_uppercase()).unwrap();
        let lower = Uuid::parse(TEXT).unwrap();
        assert_eq!(upper, lower);
        assert_eq!(upper.to_string(), TEXT);
        assert_eq!(
            lower.as_bytes(),
            &[
                0x83, 0xb8, 0xf4, 0xf2, 0x50, 0x9f, 0x38, 0x2f, 0x3c, 0x1e, 0xe6, 0xbf, 0xe0, 0xfa,
                0x10, 0x01
            ]
        );
        assert_eq!(Uuid::from_bytes(lower.into_bytes()), lower);
        assert_eq!(
            Uuid::NIL.to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
    }

    #[test]
    fn only_the_hyphenated_36_character_form_is_accepted() {
        for bad in [
            "",
            "83b8f4f2509f382f3c1ee6bfe0fa1001",
            "{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}",
            "urn:uuid:83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa10011",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100g",
            "83b8f4f2-509f-382f-3c1ee-6bfe0fa1001",
            "83b8f4f2+509f-382f-3c1e-e6bfe0fa1001",
            " 83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n",
            "../../../../../../../../../etc/passw",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa10é",
        ] {
            let error = Uuid::parse(bad).unwrap_err();
            assert_eq!(error, UuidError::Malformed(bad.to_owned()), "{bad:?}");
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn any_spelling_reads_the_simple_braced_and_urn_forms_as_the_same_uuid() {
        let uuid = Uuid::parse(TEXT).unwrap();
        for text in [
            TEXT.to_owned(),
            TEXT.to_ascii_uppercase(),
            TEXT.replace('-', ""),
            TEXT.replace('-', "").to_ascii_uppercase(),
            format!("{{{TEXT}}}"),
            format!("urn:uuid:{TEXT}"),
            format!("URN:UUID:{}", TEXT.to_ascii_uppercase()),
        ] {
            assert_eq!(Uuid::parse_any_spelling(&text), Ok(uuid), "{text:?}");
        }
        assert_eq!(uuid.to_string(), TEXT);
    }

    #[test]
    fn any_spelling_still_refuses_what_no_spelling_allows_naming_the_input() {
        for bad in [
            "",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100g",
            "83b8f4f2509f382f3c1ee6bfe0fa100g",
            "83b8f4f2509f382f3c1ee6bfe0fa100",
            "83b8f4f2-509f382f3c1ee6bfe0fa1001",
            "83b8f4f2509f382f3c1ee6bfe0fa10é",
            "{83b8f4f2509f382f3c1ee6bfe0fa1001}",
            "{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            "(83b8f4f2-509f-382f-3c1e-e6bfe0fa1001)",
            "urn:uuid:83b8f4f2509f382f3c1ee6bfe0fa1001",
            "urn:uuid:{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}",
            "uuid:83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            "ürn:uid:83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            " 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            "../../../../../../../../../etc/passw",
        ] {
            let error = Uuid::parse_any_spelling(bad).unwrap_err();
            assert_eq!(error, UuidError::Malformed(bad.to_owned()), "{bad:?}");
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn order_is_the_order_of_the_text() {
        let mut texts = vec![
            "ffffffff-0000-0000-0000-000000000000",
            "0a000000-0000-0000-0000-000000000000",
            "a0000000-0000-0000-0000-000000000000",
            "00000000-0000-0000-0000-00000000000b",
        ];
        let mut uuids: Vec<Uuid> = texts.iter().map(|t| Uuid::parse(t).unwrap()).collect();
        uuids.sort();
        texts.sort();
        let printed: Vec<String> = uuids.iter().map(ToString::to_string).collect();
        assert_eq!(printed, texts);
    }

    #[test]
    fn serde_uses_the_lower_case_text_and_validates() {
        let uuid = Uuid::parse(TEXT).unwrap();
        assert_eq!(serde_json::to_string(&uuid).unwrap(), format!("\"{TEXT}\""));
        let upper = format!("\"{}\"", TEXT.to_ascii_uppercase());
        assert_eq!(serde_json::from_str::<Uuid>(&upper).unwrap(), uuid);
        let error = serde_json::from_str::<Uuid>("\"not-a-uuid\"").unwrap_err();
        assert!(error.to_string().contains("not-a-uuid"), "{error}");
    }
}
