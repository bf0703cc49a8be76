//! Feeds a streamed provider reply (`text/event-stream`, or a plain JSON
//! body from a server that ignores `stream`) to the SSE decoder and to the
//! Anthropic or OpenAI stream assembler, in one piece and in pieces whose
//! sizes come from the input, with the default limits or tiny ones.
//! Nothing may panic, and both splits agree: the SSE decoder on every event
//! and the error, the assembler on the first error, the text fragments
//! (joined per block), completeness and the finished reply. A reply over a
//! limit is an error (the whole body's is `TooLarge`), never a panic.
//!
//! Input: a flags byte (bit 0: OpenAI, else Anthropic; bit 1: tiny
//! limits), a count `n`, `n` piece sizes, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::provider::sse::{SseDecoder, SseError, SseEvent, SseLimits};
use proto::provider::stream::{Assembler, DeltaKind, Fragment, StreamError, StreamLimits};
use proto::provider::{Kind, ProviderResponse};

/// The body cut as the sizes say (cycled; 0 counts as 1); no sizes: whole.
fn pieces<'a>(body: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let (mut out, mut at, mut i) = (Vec::new(), 0, 0);
    while at < body.len() {
        let n = match sizes.get(i % sizes.len().max(1)) {
            Some(&s) => usize::from(s).clamp(1, body.len() - at),
            None => body.len() - at,
        };
        out.push(&body[at..at + n]);
        at += n;
        i += 1;
    }
    out
}

fn sse_run(limits: SseLimits, chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<SseError>) {
    let mut d = SseDecoder::new(limits);
    let mut events = Vec::new();
    for c in chunks {
        d.feed(c);
        loop {
            match d.poll() {
                Ok(Some(ev)) => {
                    assert!(ev.data.len() <= limits.max_event, "event over its limit");
                    events.push(ev);
                }
                Ok(None) => break,
                Err(e) => {
                    // Sticky: the decoder keeps refusing.
                    assert_eq!(d.poll(), Err(e.clone()));
                    return (events, Some(e));
                }
            }
        }
    }
    (events, None)
}

#[derive(Debug, PartialEq)]
struct Seen {
    error: Option<StreamError>,
    fragments: Vec<(usize, DeltaKind, String)>,
    complete: bool,
    reply: Option<Result<ProviderResponse, StreamError>>,
}

/// Adjacent fragments of one block joined: how they are cut depends on
/// the chunks, what they say must not.
fn join(frags: Vec<Fragment>) -> Vec<(usize, DeltaKind, String)> {
    let mut out: Vec<(usize, DeltaKind, String)> = Vec::new();
    for f in frags {
        assert!(!f.text.is_empty(), "an empty fragment");
        match out.last_mut() {
            Some((i, k, t)) if *i == f.index && *k == f.kind => t.push_str(&f.text),
            _ => out.push((f.index, f.kind, f.text)),
        }
    }
    out
}

fn stream_run(kind: Kind, limits: StreamLimits, chunks: &[&[u8]]) -> Seen {
    let mut asm = Assembler::new(kind, limits);
    let mut frags = Vec::new();
    let mut error = None;
    for c in chunks {
        if let Err(e) = asm.feed(c, &mut frags) {
            error = Some(e);
            break;
        }
    }
    assert!(asm.bytes() <= limits.max_bytes || error.is_some());
    let complete = asm.is_complete();
    let reply = error.is_none().then(|| asm.finish());
    Seen {
        error,
        fragments: join(frags),
        complete,
        reply,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((&n, rest)) = rest.split_first() else {
        return;
    };
    let n = usize::from(n % 16).min(rest.len());
    let (sizes, body) = rest.split_at(n);
    let kind = if flags & 1 == 1 {
        Kind::Openai
    } else {
        Kind::Anthropic
    };
    let limits = if flags & 2 == 2 {
        StreamLimits {
            sse: SseLimits {
                max_line: 96,
                max_event: 160,
            },
            max_bytes: 2048,
        }
    } else {
        StreamLimits::default()
    };
    let whole: &[&[u8]] = if body.is_empty() { &[] } else { &[body] };
    let split = pieces(body, sizes);

    let one = sse_run(limits.sse, whole);
    let many = sse_run(limits.sse, &split);
    assert_eq!(one, many, "the SSE decoder depends on how the body was cut");
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    if body.len() <= 512 {
        assert_eq!(one, sse_run(limits.sse, &bytewise), "byte by byte differs");
    }

    let one = stream_run(kind, limits, whole);
    let many = stream_run(kind, limits, &split);
    if body.len() > limits.max_bytes {
        // The size bound is checked before parsing: the whole body is
        // refused at once, the pieces by it or by an earlier error.
        let too_large = Some(StreamError::TooLarge {
            limit: limits.max_bytes,
        });
        assert_eq!(one.error, too_large);
        assert!(many.error.is_some(), "a body over the bound was accepted");
    } else {
        assert_eq!(one, many, "the assembler depends on how the body was cut");
    }
});
