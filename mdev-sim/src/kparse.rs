//! The kernel's own parsers for sysfs input, reproduced so the simulated host accepts and
//! refuses exactly the byte strings the real store functions do (`lib/kstrtox.c`,
//! `lib/uuid.c`, `lib/string.c`).

/// `kstrtoull(s, base)`: an optional `+`, digits in `base` (0 = auto: `0x` hex, leading `0`
/// octal, else decimal), then at most one `\n`. `Err(errno)` like the kernel: EINVAL for
/// bad syntax, ERANGE for overflow of `max`.
pub(crate) fn kstrtoul(input: &[u8], base: u32, max: u64) -> Result<u64, i32> {
    let mut s = input;
    if let Some(rest) = s.strip_prefix(b"+") {
        s = rest;
    }
    let mut base = base;
    if base == 0 {
        if s.len() >= 2
            && s[0] == b'0'
            && (s[1] | 0x20) == b'x'
            && s.get(2).is_some_and(u8::is_ascii_hexdigit)
        {
            base = 16;
            s = &s[2..];
        } else if s.first() == Some(&b'0') {
            base = 8;
        } else {
            base = 10;
        }
    } else if base == 16 && s.len() >= 2 && s[0] == b'0' && (s[1] | 0x20) == b'x' {
        s = &s[2..];
    }
    let mut value: u64 = 0;
    let mut digits = 0usize;
    let mut overflow = false;
    for &byte in s {
        let Some(digit) = (byte as char).to_digit(base) else {
            break;
        };
        digits += 1;
        match value
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(u64::from(digit)))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    if digits == 0 {
        return Err(libc::EINVAL);
    }
    let rest = &s[digits..];
    if !(rest.is_empty() || rest == b"\n") {
        return Err(libc::EINVAL);
    }
    if overflow || value > max {
        return Err(libc::ERANGE);
    }
    Ok(value)
}

/// `kstrtobool`: the first byte decides (`1yYtT` / `0nNfF`), `on`/`off` by the second.
pub(crate) fn kstrtobool(input: &[u8]) -> Result<bool, i32> {
    match input {
        [b'1' | b'y' | b'Y' | b't' | b'T', ..] => Ok(true),
        [b'0' | b'n' | b'N' | b'f' | b'F', ..] => Ok(false),
        [b'o' | b'O', b'n' | b'N', ..] => Ok(true),
        [b'o' | b'O', b'f' | b'F', ..] => Ok(false),
        _ => Err(libc::EINVAL),
    }
}

/// `uuid_is_valid` + `guid_parse` as `create_store` uses them: the write must be 36 or 37
/// bytes, and the first 36 must be a dashed hex UUID (either case). The 37th byte is never
/// looked at. Returns the lower-case name the kernel gives the device (`%pUl`).
pub(crate) fn parse_create_uuid(input: &[u8]) -> Result<String, i32> {
    const UUID_STRING_LEN: usize = 36;
    if input.len() < UUID_STRING_LEN || input.len() > UUID_STRING_LEN + 1 {
        return Err(libc::EINVAL);
    }
    let text = &input[..UUID_STRING_LEN];
    for (index, &byte) in text.iter().enumerate() {
        let ok = match index {
            8 | 13 | 18 | 23 => byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        };
        if !ok {
            return Err(libc::EINVAL);
        }
    }
    // Every byte was checked to be ASCII above.
    Ok(String::from_utf8_lossy(text).to_ascii_lowercase())
}

/// `sysfs_streq`: equal, ignoring one trailing newline on either side.
pub(crate) fn sysfs_streq(input: &[u8], name: &str) -> bool {
    let trimmed = input.strip_suffix(b"\n").unwrap_or(input);
    trimmed == name.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtoul_matches_the_kernel() {
        assert_eq!(kstrtoul(b"2", 0, u64::from(u16::MAX)), Ok(2));
        assert_eq!(kstrtoul(b"2\n", 0, u64::from(u16::MAX)), Ok(2));
        assert_eq!(kstrtoul(b"+3", 0, u64::from(u16::MAX)), Ok(3));
        assert_eq!(kstrtoul(b"0x10", 0, u64::from(u16::MAX)), Ok(16));
        assert_eq!(kstrtoul(b"010", 0, u64::from(u16::MAX)), Ok(8));
        assert_eq!(kstrtoul(b"abc", 0, u64::from(u16::MAX)), Err(libc::EINVAL));
        assert_eq!(
            kstrtoul(b"2\n\n", 0, u64::from(u16::MAX)),
            Err(libc::EINVAL)
        );
        assert_eq!(kstrtoul(b" 2", 0, u64::from(u16::MAX)), Err(libc::EINVAL));
        assert_eq!(kstrtoul(b"", 0, u64::from(u16::MAX)), Err(libc::EINVAL));
        assert_eq!(kstrtoul(b"-1", 0, u64::from(u16::MAX)), Err(libc::EINVAL));
        assert_eq!(
            kstrtoul(b"70000", 0, u64::from(u16::MAX)),
            Err(libc::ERANGE)
        );
        assert_eq!(
            kstrtoul(b"99999999999999999999999", 0, u64::MAX),
            Err(libc::ERANGE)
        );
        assert_eq!(kstrtoul(b"09", 0, u64::MAX), Err(libc::EINVAL));
    }

    #[test]
    fn kstrtobool_takes_the_kernel_spellings() {
        assert_eq!(kstrtobool(b"0\n"), Ok(false));
        assert_eq!(kstrtobool(b"yes"), Ok(true));
        assert_eq!(kstrtobool(b"off"), Ok(false));
        assert_eq!(kstrtobool(b"2"), Err(libc::EINVAL));
        assert_eq!(kstrtobool(b""), Err(libc::EINVAL));
    }

    #[test]
    fn create_uuid_length_and_case_rules() {
        let good = "83B8F4F2-509F-382F-3C1E-E6BFE0FA1001";
        assert_eq!(
            parse_create_uuid(good.as_bytes()).unwrap(),
            good.to_ascii_lowercase()
        );
        assert!(parse_create_uuid(format!("{good}\n").as_bytes()).is_ok());
        assert!(parse_create_uuid(format!("{good}x").as_bytes()).is_ok());
        assert_eq!(
            parse_create_uuid(format!("{good}xy").as_bytes()),
            Err(libc::EINVAL)
        );
        assert_eq!(parse_create_uuid(&good.as_bytes()[..35]), Err(libc::EINVAL));
        assert_eq!(
            parse_create_uuid(b"83b8f4f2509f382f3c1ee6bfe0fa1001"),
            Err(libc::EINVAL)
        );
        assert_eq!(
            parse_create_uuid(b"83b8f4f2-509f-382f-3c1e-e6bfe0fa100g"),
            Err(libc::EINVAL)
        );
        assert_eq!(
            parse_create_uuid(b"{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}"),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn streq_ignores_one_newline() {
        assert!(sysfs_streq(b"0000:01:00.1\n", "0000:01:00.1"));
        assert!(sysfs_streq(b"0000:01:00.1", "0000:01:00.1"));
        assert!(!sysfs_streq(b"0000:01:00.1\n\n", "0000:01:00.1"));
    }
}
