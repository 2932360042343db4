//! Bounds on the shape of an untrusted domain XML, checked element by element in time linear
//! in the input.
//!
//! libvirt waits for the hook with the domain locked, so reading its XML must stay fast for
//! any input under [`crate::MAX_DOMAIN_XML_BYTES`]. The size bound alone does not give that:
//! work that grows with the nesting depth at each element, or with the attribute count at
//! each attribute, is quadratic (measured before these bounds: 192 s for 200,000 nested
//! elements, 66 s for 300,000 attributes on one `<hostdev>`; docs/benchmarks.md). So every
//! start tag passes through [`ShapeGuard::enter`] before anything else looks at it: it counts
//! the depth, the tag's attributes (refusing a repeated one, which makes XML not well-formed)
//! and the namespace declarations of the document, once each, and refuses the document at the
//! first bound exceeded with an error naming that bound. libvirt writes domains a few levels
//! deep with at most about a dozen attributes per element and a handful of namespaces, so the
//! bounds are far above any real domain.

use quick_xml::events::BytesStart;

/// The deepest element nesting accepted (`<domain>` is depth 1). libvirt's deepest elements
/// are about 6 levels down; other applications' metadata adds a few.
pub const MAX_DEPTH: usize = 256;

/// The most attributes one element may carry (namespace declarations included). libvirt's
/// busiest elements carry about a dozen.
pub const MAX_ATTRIBUTES: usize = 256;

/// The most namespace declarations (`xmlns`, `xmlns:p`) a document may hold. Resolving an
/// element's name looks through the declarations in scope, so this bounds that work per
/// element; a domain declares one per application that keeps metadata in it, and libvirt's
/// own `qemu:` namespaces.
pub const MAX_NAMESPACE_DECLARATIONS: usize = 64;

/// A bound the document exceeds. Each message names the bound and where it was crossed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Elements nested deeper than [`MAX_DEPTH`].
    #[error("domain XML nests elements more than {limit} levels deep (<{element}> at byte {position}); refused")]
    TooDeep {
        /// The bound.
        limit: usize,
        /// The element that went past it.
        element: String,
        /// Its byte offset.
        position: u64,
    },
    /// An element with more than [`MAX_ATTRIBUTES`] attributes.
    #[error("domain XML element <{element}> at byte {position} has more than {limit} attributes; refused")]
    TooManyAttributes {
        /// The bound.
        limit: usize,
        /// The element.
        element: String,
        /// Its byte offset.
        position: u64,
    },
    /// More than [`MAX_NAMESPACE_DECLARATIONS`] namespace declarations in the document.
    #[error("domain XML declares more than {limit} XML namespaces (at <{element}>, byte {position}); refused")]
    TooManyNamespaces {
        /// The bound.
        limit: usize,
        /// The element whose declaration went past it.
        element: String,
        /// Its byte offset.
        position: u64,
    },
    /// The same attribute twice on one element (not well-formed XML).
    #[error(
        "domain XML element <{element}> at byte {position} has the attribute {attribute} twice"
    )]
    DuplicateAttribute {
        /// The element.
        element: String,
        /// The attribute.
        attribute: String,
        /// Its byte offset.
        position: u64,
    },
    /// An attribute that cannot be read (e.g. a value without quotes).
    #[error("domain XML element <{element}> at byte {position} has a malformed attribute")]
    MalformedAttribute {
        /// The element.
        element: String,
        /// Its byte offset.
        position: u64,
    },
}

/// Tracks the depth and the namespace declarations seen so far while a document is read.
#[derive(Debug, Default)]
pub struct ShapeGuard {
    depth: usize,
    namespace_declarations: usize,
}

impl ShapeGuard {
    /// Checks the start tag `start` at byte `position` (one level below the elements entered
    /// and not yet left). Linear in the tag's length plus `n log n` in its attribute count
    /// (at most [`MAX_ATTRIBUTES`]).
    pub fn enter(&mut self, start: &BytesStart<'_>, position: u64) -> Result<(), ShapeError> {
        let element = || String::from_utf8_lossy(start.name().as_ref()).into_owned();
        if self.depth >= MAX_DEPTH {
            return Err(ShapeError::TooDeep {
                limit: MAX_DEPTH,
                element: element(),
                position,
            });
        }
        let mut keys: Vec<&[u8]> = Vec::new();
        for attribute in start.attributes().with_checks(false) {
            let Ok(attribute) = attribute else {
                return Err(ShapeError::MalformedAttribute {
                    element: element(),
                    position,
                });
            };
            if keys.len() == MAX_ATTRIBUTES {
                return Err(ShapeError::TooManyAttributes {
                    limit: MAX_ATTRIBUTES,
                    element: element(),
                    position,
                });
            }
            let key = attribute.key.into_inner();
            if key == b"xmlns" || key.starts_with(b"xmlns:") {
                self.namespace_declarations += 1;
                if self.namespace_declarations > MAX_NAMESPACE_DECLARATIONS {
                    return Err(ShapeError::TooManyNamespaces {
                        limit: MAX_NAMESPACE_DECLARATIONS,
                        element: element(),
                        position,
                    });
                }
            }
            keys.push(key);
        }
        // Sorting finds a repeated key in n log n; quick-xml's own check compares each
        // attribute with all before it.
        keys.sort_unstable();
        if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(ShapeError::DuplicateAttribute {
                element: element(),
                attribute: String::from_utf8_lossy(pair[0]).into_owned(),
                position,
            });
        }
        self.depth += 1;
        Ok(())
    }

    /// An element ended.
    pub fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Elements entered and not yet left.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(tag: &str) -> BytesStart<'_> {
        let name_len = tag.find(' ').unwrap_or(tag.len());
        BytesStart::from_content(tag, name_len)
    }

    #[test]
    fn counts_depth_and_refuses_past_the_bound() {
        let mut guard = ShapeGuard::default();
        for _ in 0..MAX_DEPTH {
            guard.enter(&start("a"), 0).unwrap();
        }
        assert_eq!(guard.depth(), MAX_DEPTH);
        let error = guard.enter(&start("deep"), 7).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("domain XML nests elements more than {MAX_DEPTH} levels deep (<deep> at byte 7); refused")
        );
        guard.leave();
        guard.enter(&start("a"), 0).unwrap();
    }

    #[test]
    fn refuses_repeated_attributes_wherever_they_are() {
        let mut guard = ShapeGuard::default();
        guard.enter(&start("a x='1' y='2' z='3'"), 0).unwrap();
        let error = guard.enter(&start("a z='1' y='2' z='3'"), 5).unwrap_err();
        assert_eq!(
            error,
            ShapeError::DuplicateAttribute {
                element: "a".into(),
                attribute: "z".into(),
                position: 5
            }
        );
    }

    #[test]
    fn attribute_bound_counts_every_attribute() {
        let at_bound: String = (0..MAX_ATTRIBUTES).map(|i| format!(" a{i}='v'")).collect();
        let mut guard = ShapeGuard::default();
        guard.enter(&start(&format!("e{at_bound}")), 0).unwrap();
        let over = format!("e{at_bound} extra='v'");
        assert!(matches!(
            guard.enter(&start(&over), 0),
            Err(ShapeError::TooManyAttributes {
                limit: MAX_ATTRIBUTES,
                ..
            })
        ));
    }

    #[test]
    fn namespace_declarations_are_counted_over_the_document() {
        let mut guard = ShapeGuard::default();
        for i in 0..MAX_NAMESPACE_DECLARATIONS {
            guard
                .enter(&start(&format!("e xmlns:p{i}='urn:x'")), 0)
                .unwrap();
            guard.leave();
        }
        assert!(matches!(
            guard.enter(&start("e xmlns='urn:y'"), 3),
            Err(ShapeError::TooManyNamespaces { position: 3, .. })
        ));
    }
}
