//! The fast path: a byte scan that tells, without parsing, that a domain cannot hold a vGPU.
//!
//! The hook runs synchronously on every operation of every domain on the host, so a domain
//! without vGPUs must cost a process start and one pass over a few kilobytes. A domain can only
//! ask for a vGPU through a `<hostdev` element or an element in [`crate::NAMESPACE`]; if
//! neither byte string occurs, no parse is needed. The scan may say "maybe" for domains that
//! turn out to hold nothing of ours (a NIC passed through with `<hostdev>`); the full parse
//! decides those.

use memchr::memmem;

use crate::NAMESPACE;

/// `false` when the domain XML certainly asks for no vGPU; `true` when it must be parsed.
///
/// A namespace declaration must spell the URI literally (libvirt always writes it that way);
/// an XML document that hides it behind character references is not one libvirt produced.
pub fn may_hold_vgpus(domain_xml: &[u8]) -> bool {
    memmem::find(domain_xml, b"<hostdev").is_some()
        || memmem::find(domain_xml, NAMESPACE.as_bytes()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_domain_needs_no_parse() {
        let xml =
            b"<domain type='kvm'><name>web</name><devices><disk type='file'/></devices></domain>";
        assert!(!may_hold_vgpus(xml));
        assert!(!may_hold_vgpus(b""));
    }

    #[test]
    fn hostdev_or_namespace_needs_a_parse() {
        assert!(may_hold_vgpus(
            b"<domain><devices><hostdev mode='subsystem' type='mdev'/></devices></domain>"
        ));
        let with_metadata =
            format!("<domain><metadata><v:vgpus xmlns:v=\"{NAMESPACE}\"/></metadata></domain>");
        assert!(may_hold_vgpus(with_metadata.as_bytes()));
    }

    #[test]
    fn the_word_hostdev_outside_a_tag_does_not_count() {
        // `<interface type='hostdev'>` is an SR-IOV NIC libvirt manages itself.
        assert!(!may_hold_vgpus(
            b"<domain><devices><interface type='hostdev' managed='yes'/></devices></domain>"
        ));
    }
}
