//! Fault injection: make writes to chosen paths fail with an errno, be slow, or block until
//! the test releases them.

use std::time::Duration;

/// What a matching write suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// The write fails with this errno and changes nothing.
    Fail(i32),
    /// The write sleeps this long, then proceeds normally.
    Delay(Duration),
    /// The write waits until [`crate::SimHost::release_fault`] is called, then proceeds.
    Block,
}

/// A fault rule: writes whose path matches `pattern` get `action`.
///
/// Patterns are matched against the path as written and against its canonical form (links
/// resolved); `*` matches any run of characters (including `/`), `?` one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub(crate) pattern: String,
    pub(crate) action: FaultAction,
    pub(crate) remaining: Option<u32>,
}

impl Fault {
    /// Writes matching `pattern` fail with `errno`.
    pub fn fail(pattern: impl Into<String>, errno: i32) -> Self {
        Self {
            pattern: pattern.into(),
            action: FaultAction::Fail(errno),
            remaining: None,
        }
    }

    /// Writes matching `pattern` take `delay` longer.
    pub fn slow(pattern: impl Into<String>, delay: Duration) -> Self {
        Self {
            pattern: pattern.into(),
            action: FaultAction::Delay(delay),
            remaining: None,
        }
    }

    /// Writes matching `pattern` block until the fault is released.
    pub fn block(pattern: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            action: FaultAction::Block,
            remaining: None,
        }
    }

    /// Only the next `count` matching writes are affected; then the rule is spent.
    pub fn times(mut self, count: u32) -> Self {
        self.remaining = Some(count);
        self
    }

    /// The action.
    pub fn action(&self) -> FaultAction {
        self.action
    }
}

/// Handle of an injected fault, for releasing blocked writers or removing the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FaultId(pub(crate) u64);

/// Glob match with `*` (any run) and `?` (one character).
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match(
            "/sys/*/create",
            "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"
        ));
        assert!(glob_match("*remove", "/sys/bus/mdev/devices/x/remove"));
        assert!(!glob_match("*remove", "/sys/bus/mdev/devices/x/remove2"));
        assert!(glob_match("/a?c", "/abc"));
        assert!(glob_match("/exact", "/exact"));
        assert!(!glob_match("/exact", "/exactly"));
    }
}
