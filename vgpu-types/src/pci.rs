//! PCI function addresses in the kernel's form, `dddd:bb:dd.f`.
//!
//! The domain (PCI segment) is 32 bits wide: the kernel keeps it in an `int` and prints it with
//! `%04x`, so an ordinary host shows four hex digits while an Intel VMD controller places its
//! devices in domains from `0x10000` up, which print with five or more. The bus is 8 bits, the
//! device 5 (`00`..`1f`) and the function 3 (`0`..`7`).

use std::fmt;
use std::str::FromStr;

/// Why a PCI address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PciAddressError {
    /// The text is not `DDDD:BB:DD.F`.
    #[error(
        "invalid PCI address {0:?}: use `DDDD:BB:DD.F` (hex; device 00-1f, function 0-7), \
         e.g. `0000:3b:00.0`"
    )]
    Malformed(String),
    /// A device or function number out of range when building an address from numbers.
    #[error("PCI device {device:#04x} function {function} is out of range (device 0..=0x1f, function 0..=7)")]
    OutOfRange {
        /// The device number given.
        device: u8,
        /// The function number given.
        function: u8,
    },
}

/// A PCI function address: domain (segment), bus, device and function.
///
/// Ordered by domain, then bus, device and function, which is also the order of the kernel's
/// text form for four-digit domains. Serialized as that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl PciAddress {
    /// Builds an address from its numbers; device must be ≤ 0x1f and function ≤ 7.
    pub const fn new(
        domain: u32,
        bus: u8,
        device: u8,
        function: u8,
    ) -> Result<PciAddress, PciAddressError> {
        if device > 0x1f || function > 7 {
            return Err(PciAddressError::OutOfRange { device, function });
        }
        Ok(PciAddress {
            domain,
            bus,
            device,
            function,
        })
    }

    /// Parses the kernel's form `DDDD:BB:DD.F` (either case). The domain has four hex digits,
    /// or five to eight without a leading zero (a VMD domain, as the kernel prints it); the bus
    /// and device two and the function one. Nothing else is accepted: no surrounding space,
    /// no `0x`, no short fields, so each address has one spelling.
    pub fn parse(text: &str) -> Result<PciAddress, PciAddressError> {
        let malformed = || PciAddressError::Malformed(text.to_owned());
        let (domain, rest) = text.split_once(':').ok_or_else(malformed)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(malformed)?;
        let (device, function) = rest.split_once('.').ok_or_else(malformed)?;
        let domain_ok =
            domain.len() == 4 || (5..=8).contains(&domain.len()) && !domain.starts_with('0');
        if !domain_ok || bus.len() != 2 || device.len() != 2 || function.len() != 1 {
            return Err(malformed());
        }
        let hex = |part: &str| -> Result<u32, PciAddressError> {
            if part.bytes().all(|b| b.is_ascii_hexdigit()) {
                u32::from_str_radix(part, 16).map_err(|_| malformed())
            } else {
                Err(malformed())
            }
        };
        let domain = hex(domain)?;
        let bus = u8::try_from(hex(bus)?).map_err(|_| malformed())?;
        let device = u8::try_from(hex(device)?).map_err(|_| malformed())?;
        let function = u8::try_from(hex(function)?).map_err(|_| malformed())?;
        PciAddress::new(domain, bus, device, function).map_err(|_| malformed())
    }

    /// The domain (PCI segment).
    pub const fn domain(self) -> u32 {
        self.domain
    }

    /// The bus number.
    pub const fn bus(self) -> u8 {
        self.bus
    }

    /// The device (slot) number, 0..=0x1f.
    pub const fn device(self) -> u8 {
        self.device
    }

    /// The function number, 0..=7.
    pub const fn function(self) -> u8 {
        self.function
    }

    /// The 16-bit routing id within the domain (`bus << 8 | device << 3 | function`).
    pub const fn routing_id(self) -> u16 {
        ((self.bus as u16) << 8) | ((self.device as u16) << 3) | self.function as u16
    }

    /// The address of a routing id in `domain`.
    pub const fn from_routing_id(domain: u32, rid: u16) -> PciAddress {
        PciAddress {
            domain,
            bus: (rid >> 8) as u8,
            device: ((rid >> 3) & 0x1f) as u8,
            function: (rid & 7) as u8,
        }
    }
}

impl FromStr for PciAddress {
    type Err = PciAddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        PciAddress::parse(text)
    }
}

impl TryFrom<&str> for PciAddress {
    type Error = PciAddressError;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        PciAddress::parse(text)
    }
}

impl TryFrom<String> for PciAddress {
    type Error = PciAddressError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        PciAddress::parse(&text)
    }
}

impl From<PciAddress> for String {
    fn from(address: PciAddress) -> String {
        address.to_string()
    }
}

impl fmt::Display for PciAddress {
    /// The kernel's form (`pci_name()`): `0000:3b:00.4`, lower case, domain at least four digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl serde::Serialize for PciAddress {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PciAddress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        PciAddress::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_form_and_prints_it_back_in_lower_case() {
        let address = PciAddress::parse("0000:3B:00.4").unwrap();
        assert_eq!(address, PciAddress::new(0, 0x3b, 0, 4).unwrap());
        assert_eq!(
            (
                address.domain(),
                address.bus(),
                address.device(),
                address.function()
            ),
            (0, 0x3b, 0, 4)
        );
        assert_eq!(address.to_string(), "0000:3b:00.4");
        // `str::parse` (what the hook and the engine call) is the same reader.
        assert_eq!("0000:3b:00.4".parse::<PciAddress>(), Ok(address));
        let last = PciAddress::parse("ffff:ff:1f.7").unwrap();
        assert_eq!(last.to_string(), "ffff:ff:1f.7");
    }

    #[test]
    fn vmd_domains_above_ffff_keep_all_their_digits() {
        let vmd = PciAddress::parse("10000:e1:1f.7").unwrap();
        assert_eq!(vmd.domain(), 0x1_0000);
        assert_eq!(vmd.to_string(), "10000:e1:1f.7");
        assert_eq!("10000:e1:1f.7".parse::<PciAddress>(), Ok(vmd));
        let widest = PciAddress::parse("FFFFFFFF:00:00.0").unwrap();
        assert_eq!(widest.domain(), u32::MAX);
        assert_eq!(widest.to_string(), "ffffffff:00:00.0");
    }

    #[test]
    fn malformed_addresses_are_refused_naming_the_input() {
        for text in [
            "",
            "3b:00.4",
            "0:3b:00.4",
            "000:3b:00.4",
            "00000:3b:00.4",
            "100000000:3b:00.0",
            "0000:3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "0000:zz:00.0",
            "0000:3b:00.4x",
            "0000:+3:00.0",
            "0000:3:00.0",
            "0000:3b:0.0",
            "0000:3b:00.04",
            " 0000:3b:00.0",
            "0000:3b:00.0\n",
            "0x00:3b:00.0",
            "0000.3b:00.0",
            "0000:3b:00:0",
            "0000:3b:00.0.0",
        ] {
            let error = PciAddress::parse(text).unwrap_err();
            assert_eq!(text.parse::<PciAddress>(), Err(error.clone()), "{text:?}");
            assert_eq!(
                error,
                PciAddressError::Malformed(text.to_owned()),
                "{text:?}"
            );
            assert!(
                error.to_string().contains(&format!("{text:?}")),
                "the message names the input: {error}"
            );
        }
    }

    #[test]
    fn numbers_out_of_range_are_refused() {
        assert_eq!(
            PciAddress::new(0, 0, 0x20, 0),
            Err(PciAddressError::OutOfRange {
                device: 0x20,
                function: 0
            })
        );
        assert!(PciAddress::new(0, 0, 0, 8).is_err());
        assert!(PciAddress::new(u32::MAX, 0xff, 0x1f, 7).is_ok());
    }

    #[test]
    fn order_is_numeric_and_agrees_with_the_text_for_four_digit_domains() {
        let mut texts = vec![
            "0000:3b:00.1",
            "0000:0a:00.0",
            "0001:00:00.0",
            "0000:3b:00.0",
        ];
        let mut addresses: Vec<PciAddress> = texts
            .iter()
            .map(|t| PciAddress::parse(t).unwrap())
            .collect();
        addresses.sort();
        texts.sort();
        let printed: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        assert_eq!(printed, texts);
        assert!(
            PciAddress::parse("ffff:ff:1f.7").unwrap()
                < PciAddress::parse("10000:00:00.0").unwrap()
        );
    }

    #[test]
    fn routing_ids_round_trip() {
        let address = PciAddress::parse("0002:3b:1f.5").unwrap();
        assert_eq!(address.routing_id(), 0x3bfd);
        assert_eq!(PciAddress::from_routing_id(2, 0x3bfd), address);
    }

    #[test]
    fn serde_uses_the_text_form_and_validates() {
        let address = PciAddress::parse("0000:3b:00.4").unwrap();
        assert_eq!(serde_json::to_string(&address).unwrap(), "\"0000:3b:00.4\"");
        assert_eq!(
            serde_json::from_str::<PciAddress>("\"0000:3B:00.4\"").unwrap(),
            address
        );
        let error = serde_json::from_str::<PciAddress>("\"0000:3b:20.0\"").unwrap_err();
        assert!(error.to_string().contains("0000:3b:20.0"), "{error}");
        assert!(serde_json::from_str::<PciAddress>("42").is_err());
    }
}
