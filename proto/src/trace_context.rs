//! The W3C Trace Context `traceparent` header (level 1), parsed purely so
//! the engine can parent a request's span on a caller's trace. Anything
//! invalid is treated as absent (the spec's rule: start a new trace).

use crate::wire::hex::decode_lower;

/// A valid inbound `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    /// The `trace-flags` byte (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// Parses a header value; `None` when it is not a valid `traceparent`.
    /// Version `00` must be exactly 55 characters; a later version may carry
    /// more after a `-` (forward compatibility); `ff` is never valid.
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let value = trim(value);
        let head = value.get(..55)?;
        let version = hex_byte(head.get(0..2)?)?;
        if version == 0xff || head.get(2) != Some(&b'-') {
            return None;
        }
        match value.get(55) {
            None => {}
            Some(b'-') if version != 0 => {}
            Some(_) => return None,
        }
        let trace_id = decode_lower::<16>(head.get(3..35)?)?;
        if head.get(35) != Some(&b'-') {
            return None;
        }
        let parent_id = decode_lower::<8>(head.get(36..52)?)?;
        if head.get(52) != Some(&b'-') {
            return None;
        }
        let flags = hex_byte(head.get(53..55)?)?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    v.get(start..end).unwrap_or(&[])
}

/// Two lowercase hex digits (the spec forbids uppercase).
fn hex_byte(two: &[u8]) -> Option<u8> {
    decode_lower::<1>(two).map(|[b]| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_a_valid_header() {
        let tp = TraceParent::parse(VALID.as_bytes()).unwrap();
        assert_eq!(tp.trace_id[0], 0x4b);
        assert_eq!(tp.trace_id[15], 0x36);
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(tp.sampled());
        let tp = TraceParent::parse(b" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ")
            .unwrap();
        assert!(!tp.sampled());
    }

    #[test]
    fn rejects_invalid_headers() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn later_versions_may_carry_more() {
        let v = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(TraceParent::parse(v.as_bytes()).is_some());
        let v = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x";
        assert!(TraceParent::parse(v.as_bytes()).is_none());
    }
}
