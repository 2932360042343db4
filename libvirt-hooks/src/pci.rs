//! PCI addresses as the hook meets them: libvirt's attribute form
//! (`domain='0x0000' bus='0x3b' slot='0x00' function='0x4'`) and sysfs' BDF form
//! (`0000:3b:00.4`). The address type is the workspace's one [`PciAddress`] (`vgpu-types`,
//! 32-bit domain for VMD); this module adds the libvirt attribute reader.

pub use vgpu_types::PciAddress;

/// Why a PCI address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PciAddressError {
    /// The text is not `DDDD:BB:SS.F`.
    #[error(transparent)]
    Malformed(#[from] vgpu_types::PciAddressError),
    /// A libvirt address attribute is not a number in range.
    #[error("PCI address attribute {attribute}='{value}' is not a number in 0..={max:#x}")]
    BadAttribute {
        /// `domain`, `bus`, `slot` or `function`.
        attribute: &'static str,
        /// The text found.
        value: String,
        /// The largest value allowed.
        max: u32,
    },
}

/// Builds an address from libvirt's `<address domain= bus= slot= function=/>` attribute values.
/// libvirt writes hex with `0x`, and also accepts decimal; so do we. A missing `domain` means 0
/// as in libvirt.
pub fn from_libvirt_attributes(
    domain: Option<&str>,
    bus: &str,
    slot: &str,
    function: &str,
) -> Result<PciAddress, PciAddressError> {
    let domain = match domain {
        Some(text) => parse_number("domain", text, u32::MAX)?,
        None => 0,
    };
    let bus = narrow(parse_number("bus", bus, 0xff)?);
    let slot = narrow(parse_number("slot", slot, 0x1f)?);
    let function = narrow(parse_number("function", function, 0x7)?);
    // The slot and function were bounded above, so the address is in range.
    Ok(PciAddress::new(domain, bus, slot, function)?)
}

/// Each caller bounds the value to 0xff or less first, so the narrowing cannot lose bits.
fn narrow(value: u32) -> u8 {
    u8::try_from(value).unwrap_or(u8::MAX)
}

fn parse_number(attribute: &'static str, text: &str, max: u32) -> Result<u32, PciAddressError> {
    let bad = || PciAddressError::BadAttribute {
        attribute,
        value: text.to_owned(),
        max,
    };
    let trimmed = text.trim();
    let parsed = match trimmed
        .strip_prefix("0x")
        .or_else(|| trimmed.strip_prefix("0X"))
    {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => trimmed.parse::<u32>(),
    };
    match parsed {
        Ok(value) if value <= max => Ok(value),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libvirt_attributes_in_hex_and_decimal() {
        let hex = from_libvirt_attributes(Some("0x0000"), "0x3b", "0x00", "0x4").unwrap();
        let decimal = from_libvirt_attributes(None, "59", "0", "4").unwrap();
        assert_eq!(hex, decimal);
        assert_eq!(hex.to_string(), "0000:3b:00.4");
    }

    #[test]
    fn refuses_out_of_range_libvirt_attributes_naming_the_attribute() {
        let error = from_libvirt_attributes(None, "0x3b", "0x20", "0x0").unwrap_err();
        assert_eq!(
            error.to_string(),
            "PCI address attribute slot='0x20' is not a number in 0..=0x1f"
        );
        assert!(from_libvirt_attributes(None, "0x100", "0", "0").is_err());
        assert!(from_libvirt_attributes(None, "0x3b", "0", "8").is_err());
        assert!(from_libvirt_attributes(None, "bus", "0", "0").is_err());
    }
}
