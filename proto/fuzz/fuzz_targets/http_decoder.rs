//! Feeds arbitrary bytes to `RequestDecoder` twice — in one piece and in
//! pieces whose sizes come from the input's first bytes — and checks that
//! nothing panics, polling terminates, rejections are sticky, and both runs
//! agree (ContinueExpected aside, which legitimately depends on the split).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::http::{Decoded, Limits, Rejection, Request, RequestDecoder};

fn run(data: &[u8], limits: Limits, sizes: &[u8]) -> (Vec<Request>, Option<Rejection>) {
    let mut d = RequestDecoder::new(limits);
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    let mut polls = 0usize;
    while at < data.len() {
        let n = if sizes.is_empty() {
            data.len() - at
        } else {
            usize::from(sizes[i % sizes.len()]).clamp(1, data.len() - at)
        };
        i += 1;
        d.feed(&data[at..at + n]);
        at += n;
        loop {
            polls += 1;
            assert!(polls <= 4 * data.len() + 16, "poll does not terminate");
            match d.poll() {
                Ok(Some(Decoded::Request(r))) => out.push(r),
                Ok(Some(Decoded::ContinueExpected)) => {}
                Ok(None) => break,
                Err(r) => {
                    assert_eq!(d.poll(), Err(r));
                    return (out, Some(r));
                }
            }
        }
    }
    (out, None)
}

fuzz_target!(|input: &[u8]| {
    let Some((&control, rest)) = input.split_first() else {
        return;
    };
    let split_len = usize::from(control & 0x0f).min(rest.len());
    let (sizes, data) = rest.split_at(split_len);
    let limits = if control & 0x80 != 0 {
        Limits {
            max_head_bytes: 64 + usize::from(control & 0x30) * 4,
            max_headers: usize::from(control & 0x0f) % 8,
            max_body_bytes: 128,
            ..Limits::default()
        }
    } else {
        Limits::default()
    };
    let whole = run(data, limits, &[]);
    let split = run(data, limits, sizes);
    assert_eq!(whole, split);
});
