//! The domain's UUID from the top of its XML, without reading the rest.
//!
//! `release` goes by the domain's UUID, whatever its XML says about devices (a vGPU
//! hot-unplugged before the domain stopped is no longer in it), so the hook needs the UUID of
//! every domain that stops. libvirt writes `<uuid>` as the second child of `<domain>`, right
//! after `<name>`, so reading stops after a few hundred bytes. The read is bounded like the
//! full parse ([`crate::bounded`]) and linear in what it reads.

use quick_xml::events::Event;
use quick_xml::Reader;
use vgpu_types::Uuid;

use crate::bounded::ShapeGuard;

/// The text of `<domain><uuid>` as a UUID; `None` when the XML is not a domain, has no such
/// element before the root ends, holds something else there, or is malformed or out of bounds
/// before it (the full parse then reports what is wrong).
pub fn domain_uuid(domain_xml: &[u8]) -> Option<Uuid> {
    let mut reader = Reader::from_reader(domain_xml);
    let mut shape = ShapeGuard::default();
    let mut in_uuid = false;
    let mut text = String::new();
    loop {
        let position = reader.buffer_position();
        match reader.read_event().ok()? {
            Event::Start(start) => {
                shape.enter(&start, position).ok()?;
                let depth = shape.depth();
                if depth == 1 && start.name().as_ref() != b"domain" {
                    return None;
                }
                in_uuid = depth == 2 && start.name().as_ref() == b"uuid";
            }
            Event::Empty(start) => {
                shape.enter(&start, position).ok()?;
                shape.leave();
            }
            Event::Text(chunk) if in_uuid => text.push_str(&chunk.unescape().ok()?),
            Event::End(_) => {
                if in_uuid {
                    return Uuid::parse_any_spelling(text.trim()).ok();
                }
                shape.leave();
                if shape.depth() == 0 {
                    return None;
                }
            }
            Event::DocType(_) | Event::Eof => return None,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0";

    #[test]
    fn reads_the_uuid_libvirt_writes_after_the_name() {
        let xml = format!("<domain type='kvm' id='3'>\n  <name>web</name>\n  <uuid>{UUID}</uuid>\n  <devices/>\n</domain>");
        assert_eq!(domain_uuid(xml.as_bytes()), Uuid::parse(UUID).ok());
    }

    #[test]
    fn stops_at_the_uuid_without_reading_the_rest() {
        // What follows the UUID is not even well-formed: it is never read.
        let xml = format!("<domain><uuid> {UUID} </uuid><devices><<<");
        assert_eq!(domain_uuid(xml.as_bytes()), Uuid::parse(UUID).ok());
    }

    #[test]
    fn only_the_domain_s_own_uuid_counts() {
        let nested = format!("<domain><metadata><uuid>{UUID}</uuid></metadata></domain>");
        assert_eq!(domain_uuid(nested.as_bytes()), None);
        let other_root = format!("<network><uuid>{UUID}</uuid></network>");
        assert_eq!(domain_uuid(other_root.as_bytes()), None);
        assert_eq!(
            domain_uuid(b"<domain><uuid>not-a-uuid</uuid></domain>"),
            None
        );
        assert_eq!(domain_uuid(b"<domain><name>x</name></domain>"), None);
        assert_eq!(domain_uuid(b""), None);
    }

    #[test]
    fn out_of_bounds_input_before_the_uuid_gives_none() {
        let depth = crate::bounded::MAX_DEPTH + 1;
        let xml = format!(
            "<domain>{}{}<uuid>{UUID}</uuid></domain>",
            "<a>".repeat(depth),
            "</a>".repeat(depth)
        );
        assert_eq!(domain_uuid(xml.as_bytes()), None);
    }
}
