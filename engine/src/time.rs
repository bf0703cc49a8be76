//! The engine's two clocks as distinct types, so a deadline can never be
//! compared with a wall-clock stamp nor two instants be added.

use std::ops::{Add, AddAssign, Sub};

/// A point on the driver's monotonic clock, in milliseconds from an origin
/// the driver chooses (timers and deadlines; never shown to clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonoMs(pub u64);

/// A wall-clock instant, milliseconds since the Unix epoch (`created_at`
/// stamps, retention ages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixMs(pub u64);

/// `instant + milliseconds` (saturating: a huge configured timeout means
/// "never", not a wrapped deadline in the past).
impl Add<u64> for MonoMs {
    type Output = MonoMs;
    fn add(self, ms: u64) -> MonoMs {
        MonoMs(self.0.saturating_add(ms))
    }
}

/// Milliseconds from `earlier` to `self` (0 if `earlier` is later).
impl Sub for MonoMs {
    type Output = u64;
    fn sub(self, earlier: MonoMs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl AddAssign<u64> for MonoMs {
    fn add_assign(&mut self, ms: u64) {
        *self = *self + ms;
    }
}

impl Add<u64> for UnixMs {
    type Output = UnixMs;
    fn add(self, ms: u64) -> UnixMs {
        UnixMs(self.0.saturating_add(ms))
    }
}

impl Sub for UnixMs {
    type Output = u64;
    fn sub(self, earlier: UnixMs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl AddAssign<u64> for UnixMs {
    fn add_assign(&mut self, ms: u64) {
        *self = *self + ms;
    }
}

/// A stored `created_at`-style stamp as the catalogue holds it: the
/// instant itself (8 bytes, no allocation) when the text is canonical, the
/// text verbatim otherwise (rows written by other servers), so it always
/// reads back exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    At(UnixMs),
    Text(Box<str>),
}

impl Stamp {
    pub fn from_text(text: &str) -> Stamp {
        match proto::wire::time::parse_created_at(text) {
            Some(ms) => Stamp::At(UnixMs(ms)),
            None => Stamp::Text(text.into()),
        }
    }

    /// The stored text.
    pub fn text(&self) -> String {
        match self {
            Stamp::At(ms) => proto::wire::time::format_created_at(ms.0),
            Stamp::Text(t) => t.to_string(),
        }
    }
}

impl serde::Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Stamp::At(_) => s.serialize_str(&self.text()),
            Stamp::Text(t) => s.serialize_str(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_read_back_as_stored() {
        for text in ["2026-12-01T17:33:47.123Z", "2026-12-01 17:33:47", "", "x"] {
            let st = Stamp::from_text(text);
            assert_eq!(st.text(), text);
            assert_eq!(serde_json::to_value(&st).unwrap(), text);
        }
        assert!(matches!(
            Stamp::from_text("2026-12-01T17:33:47.123Z"),
            Stamp::At(_)
        ));
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(MonoMs(u64::MAX - 1) + 10, MonoMs(u64::MAX));
        assert_eq!(MonoMs(5) - MonoMs(9), 0);
        assert_eq!(MonoMs(9) - MonoMs(5), 4);
        assert_eq!(UnixMs(1) + 2, UnixMs(3));
        assert_eq!(UnixMs(1) - UnixMs(3), 0);
    }
}
