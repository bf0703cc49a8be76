//! HTTP/2 frames (RFC 9113 §4, §6): splitting received bytes into checked
//! frames, and encoding the frames a client sends.

use super::{Error, Reason};

/// The client connection preface (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame header length (§4.1).
pub const HEADER_LEN: usize = 9;
/// Initial and smallest SETTINGS_MAX_FRAME_SIZE (§6.5.2).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// Largest allowed SETTINGS_MAX_FRAME_SIZE.
pub const MAX_FRAME_LIMIT: u32 = (1 << 24) - 1;
/// Largest flow-control window (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// Largest stream id.
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// SETTINGS parameters (§6.5.2).
pub const HEADER_TABLE_SIZE: u16 = 0x1;
pub const ENABLE_PUSH: u16 = 0x2;
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const MAX_FRAME_SIZE: u16 = 0x5;
pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// A received frame, padding and priority fields stripped.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// `flow_len` is the whole payload length, padding included: what
    /// flow control counts (§6.1).
    Data {
        stream: u32,
        end_stream: bool,
        data: Vec<u8>,
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        block: Vec<u8>,
    },
    Priority,
    RstStream {
        stream: u32,
        reason: Reason,
    },
    Settings {
        ack: bool,
        params: Vec<(u16, u32)>,
    },
    PushPromise,
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        reason: Reason,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: Vec<u8>,
    },
    /// Unknown types are ignored (§4.1).
    Unknown,
}

fn proto(what: &'static str) -> Error {
    Error::Protocol(Reason::PROTOCOL_ERROR, what)
}

fn size(what: &'static str) -> Error {
    Error::Protocol(Reason::FRAME_SIZE_ERROR, what)
}

fn be32(b: &[u8]) -> u32 {
    b.iter().take(4).fold(0, |v, &x| (v << 8) | u32::from(x))
}

/// Splits one frame off the front of `buf`: `Ok(None)` while it is not
/// whole. A length above `max_len` (our SETTINGS_MAX_FRAME_SIZE) is refused
/// from the header alone, so an oversize frame is never buffered.
pub fn parse(buf: &[u8], max_len: u32) -> Result<Option<(Frame, usize)>, Error> {
    let Some(head) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = be32(&[0, head[0], head[1], head[2]]);
    if len > max_len {
        return Err(size("frame longer than our SETTINGS_MAX_FRAME_SIZE"));
    }
    let total = HEADER_LEN + len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    // The reserved bit is ignored on receipt (§4.1).
    let stream = be32(&head[5..9]) & MAX_STREAM_ID;
    decode(head[3], head[4], stream, payload).map(|f| Some((f, total)))
}

/// The payload without its padding (§6.1, §6.2).
fn unpad(flags: u8, p: &[u8]) -> Result<&[u8], Error> {
    if flags & PADDED == 0 {
        return Ok(p);
    }
    let (&pad, rest) = p
        .split_first()
        .ok_or_else(|| size("padded frame without pad length"))?;
    rest.len()
        .checked_sub(pad as usize)
        .map(|end| &rest[..end])
        .ok_or_else(|| proto("padding longer than the payload"))
}

fn decode(kind: u8, flags: u8, stream: u32, p: &[u8]) -> Result<Frame, Error> {
    let on_stream = |what| {
        if stream == 0 {
            Err(proto(what))
        } else {
            Ok(())
        }
    };
    let on_conn = |what| {
        if stream != 0 {
            Err(proto(what))
        } else {
            Ok(())
        }
    };
    Ok(match kind {
        DATA => {
            on_stream("DATA on stream 0")?;
            Frame::Data {
                stream,
                end_stream: flags & END_STREAM != 0,
                data: unpad(flags, p)?.to_vec(),
                flow_len: p.len() as u32,
            }
        }
        HEADERS => {
            on_stream("HEADERS on stream 0")?;
            let mut block = unpad(flags, p)?;
            if flags & PRIORITY_FLAG != 0 {
                // Stream dependency and weight: priorities are ignored.
                block = block
                    .get(5..)
                    .ok_or_else(|| size("HEADERS too short for its priority"))?;
            }
            Frame::Headers {
                stream,
                end_stream: flags & END_STREAM != 0,
                end_headers: flags & END_HEADERS != 0,
                block: block.to_vec(),
            }
        }
        PRIORITY => {
            on_stream("PRIORITY on stream 0")?;
            if p.len() != 5 {
                return Err(size("PRIORITY length is not 5"));
            }
            Frame::Priority
        }
        RST_STREAM => {
            on_stream("RST_STREAM on stream 0")?;
            if p.len() != 4 {
                return Err(size("RST_STREAM length is not 4"));
            }
            Frame::RstStream {
                stream,
                reason: Reason(be32(p)),
            }
        }
        SETTINGS => {
            on_conn("SETTINGS on a stream")?;
            let ack = flags & ACK != 0;
            if (ack && !p.is_empty()) || !p.len().is_multiple_of(6) {
                return Err(size("bad SETTINGS length"));
            }
            let params = p
                .chunks_exact(6)
                .map(|c| (u16::from_be_bytes([c[0], c[1]]), be32(&c[2..])))
                .collect();
            Frame::Settings { ack, params }
        }
        PUSH_PROMISE => Frame::PushPromise,
        PING => {
            on_conn("PING on a stream")?;
            let data: [u8; 8] = p.try_into().map_err(|_| size("PING length is not 8"))?;
            Frame::Ping {
                ack: flags & ACK != 0,
                data,
            }
        }
        GOAWAY => {
            on_conn("GOAWAY on a stream")?;
            if p.len() < 8 {
                return Err(size("GOAWAY shorter than 8"));
            }
            // The debug data is not kept: it is the peer's free text.
            Frame::GoAway {
                last_stream: be32(p) & MAX_STREAM_ID,
                reason: Reason(be32(&p[4..])),
            }
        }
        WINDOW_UPDATE => {
            if p.len() != 4 {
                return Err(size("WINDOW_UPDATE length is not 4"));
            }
            let increment = be32(p) & MAX_WINDOW;
            if increment == 0 {
                return Err(proto("WINDOW_UPDATE of 0"));
            }
            Frame::WindowUpdate { stream, increment }
        }
        CONTINUATION => {
            on_stream("CONTINUATION on stream 0")?;
            Frame::Continuation {
                stream,
                end_headers: flags & END_HEADERS != 0,
                block: p.to_vec(),
            }
        }
        _ => Frame::Unknown,
    })
}

/// Appends a frame header; `len` must fit in 24 bits (callers split).
pub fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = (len as u32).min(MAX_FRAME_LIMIT).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & MAX_STREAM_ID).to_be_bytes());
}

pub fn settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    head(out, params.len() * 6, SETTINGS, 0, 0);
    for (id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, SETTINGS, ACK, 0);
}

pub fn ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    head(out, 8, PING, if ack { ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_STREAM_ID).to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// A header block as HEADERS plus as many CONTINUATION frames as
/// `max_frame` (the peer's SETTINGS_MAX_FRAME_SIZE) requires (§4.3).
pub fn headers(out: &mut Vec<u8>, stream: u32, block: &[u8], max_frame: u32, end_stream: bool) {
    let mut chunks = block.chunks(max_frame.max(1) as usize).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    loop {
        let chunk = chunks.next().unwrap_or(&[]);
        let last = chunks.peek().is_none();
        let f = flags | if last { END_HEADERS } else { 0 };
        head(out, chunk.len(), kind, f, stream);
        out.extend_from_slice(chunk);
        if last {
            return;
        }
        kind = CONTINUATION;
        flags = 0;
    }
}

/// One DATA frame; the caller keeps `chunk` within the peer's windows and
/// frame size.
pub fn data(out: &mut Vec<u8>, stream: u32, chunk: &[u8], end_stream: bool) {
    head(
        out,
        chunk.len(),
        DATA,
        if end_stream { END_STREAM } else { 0 },
        stream,
    );
    out.extend_from_slice(chunk);
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
