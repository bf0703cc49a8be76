//! Feeds arbitrary bytes to the HTTP/1.1 response decoder (what reads
//! provider, MCP and collector replies, and the relay's peers): in one
//! piece and in pieces whose sizes come from the input, strict and
//! lenient, for a `HEAD` or not. Nothing may panic, polling terminates,
//! and both splits agree on the head, the body bytes, the end and the
//! error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::http::response::{Mode, ResponseDecoder, ResponseEvent};

#[derive(Debug, PartialEq, Default)]
struct Seen {
    head: Option<(u16, String)>,
    body: Vec<u8>,
    ended: bool,
    error: bool,
}

fn run(data: &[u8], mode: Mode, head_request: bool, sizes: &[u8]) -> Seen {
    let mut d = ResponseDecoder::with_mode(mode).max_head_bytes(4096);
    d.set_head_request(head_request);
    let mut seen = Seen::default();
    let (mut at, mut i, mut polls) = (0, 0, 0usize);
    let mut drain = |d: &mut ResponseDecoder, seen: &mut Seen| loop {
        polls += 1;
        assert!(polls <= 8 * data.len() + 64, "poll does not terminate");
        match d.poll() {
            Ok(Some(ResponseEvent::Head(h))) => {
                seen.head = Some((h.status, format!("{:?}", h.framing)))
            }
            Ok(Some(ResponseEvent::Data(b))) => seen.body.extend_from_slice(&b),
            Ok(Some(ResponseEvent::End { .. })) => {
                seen.ended = true;
                return true;
            }
            Ok(None) => return false,
            Err(_) => {
                seen.error = true;
                return true;
            }
        }
    };
    while at < data.len() {
        let n = match sizes.get(i % sizes.len().max(1)) {
            Some(&s) if !sizes.is_empty() => usize::from(s).clamp(1, data.len() - at),
            _ => data.len() - at,
        };
        i += 1;
        d.feed(&data[at..at + n]);
        at += n;
        if drain(&mut d, &mut seen) {
            return seen;
        }
    }
    d.finish();
    drain(&mut d, &mut seen);
    seen
}

fuzz_target!(|input: &[u8]| {
    let Some((&control, rest)) = input.split_first() else {
        return;
    };
    let split_len = usize::from(control & 0x0f).min(rest.len());
    let (sizes, data) = rest.split_at(split_len);
    let mode = if control & 0x10 != 0 {
        Mode::Lenient
    } else {
        Mode::Strict
    };
    let head_request = control & 0x20 != 0;
    let whole = run(data, mode, head_request, &[]);
    let split = run(data, mode, head_request, sizes);
    assert_eq!(whole, split);
});
