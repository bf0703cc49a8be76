//! The connection against scripted peer bytes: what it answers, what it
//! refuses, and what it writes.

use super::*;
use crate::otel::h2::hpack::encode_field;

/// A peer whose bytes are fixed in advance; what the client writes is
/// kept. Out of input: "would block" (a silent peer), or EOF.
#[derive(Default)]
struct Peer {
    input: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Sent again on every read once `input` is used up: a peer that
    /// never stops.
    endless: Vec<u8>,
    out: Vec<u8>,
}

impl Read for Peer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.input.len() && !self.endless.is_empty() {
            let n = self.endless.len().min(buf.len());
            buf[..n].copy_from_slice(&self.endless[..n]);
            return Ok(n);
        }
        let rest = &self.input[self.pos..];
        if rest.is_empty() {
            return match self.eof {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            };
        }
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for Peer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Io for Peer {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()> {
        assert!(!t.is_zero());
        Ok(())
    }
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        encode_field(&mut b, n.as_bytes(), v.as_bytes(), false);
    }
    b
}

const HEAD: &[(&str, &str)] = &[(":status", "200"), ("content-type", "application/grpc")];
const OK: &[(&str, &str)] = &[("grpc-status", "0")];

/// Server-side frames, appended to a script.
#[derive(Default)]
struct Script(Vec<u8>);

impl Script {
    fn settings(mut self, params: &[(u16, u32)]) -> Self {
        frame::settings(&mut self.0, params);
        self
    }
    fn headers(mut self, stream: u32, fields: &[(&str, &str)], end: bool) -> Self {
        frame::headers(&mut self.0, stream, &block(fields), 16_384, end);
        self
    }
    fn data(mut self, stream: u32, bytes: &[u8], end: bool) -> Self {
        frame::data(&mut self.0, stream, bytes, end);
        self
    }
    fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }
    /// A whole unary response on `stream`.
    fn answer(self, stream: u32) -> Self {
        self.headers(stream, HEAD, false)
            .data(stream, &[0, 0, 0, 0, 0], false)
            .headers(stream, OK, true)
    }
    fn conn(self) -> Conn<Peer> {
        Conn::new(Peer {
            input: self.0,
            ..Peer::default()
        })
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn call(c: &mut Conn<Peer>, body: &[u8]) -> Result<Response, Error> {
    c.request(&block(&[(":method", "POST")]), body, soon())
}

/// The frames the client wrote, after checking the preface.
fn sent(c: &Conn<Peer>) -> Vec<Frame> {
    let out = &c.io.out;
    assert!(out.starts_with(frame::PREFACE));
    let mut rest = &out[frame::PREFACE.len()..];
    let mut frames = Vec::new();
    while let Some((f, n)) = frame::parse(rest, frame::MAX_FRAME_LIMIT).unwrap() {
        frames.push(f);
        rest = &rest[n..];
    }
    assert!(rest.is_empty());
    frames
}

fn data_sizes(frames: &[Frame]) -> Vec<usize> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Data { data, .. } => Some(data.len()),
            _ => None,
        })
        .collect()
}

fn text(fields: &[Field]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (s(n), s(v))
        })
        .collect()
}

#[test]
fn a_unary_exchange_acks_settings_and_returns_window() {
    let mut c = Script::default()
        .settings(&[(frame::MAX_CONCURRENT_STREAMS, 100)])
        .raw(&[0, 0, 0, frame::SETTINGS, frame::ACK, 0, 0, 0, 0])
        .answer(1)
        .conn();
    let r = call(&mut c, b"hello").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, [0; 5]);
    assert_eq!(text(&r.trailers), [("grpc-status".into(), "0".into())]);
    let frames = sent(&c);
    assert_eq!(
        frames[0],
        Frame::Settings {
            ack: false,
            params: vec![
                (frame::ENABLE_PUSH, 0),
                (frame::MAX_HEADER_LIST_SIZE, 65536)
            ]
        }
    );
    assert!(matches!(
        frames[1],
        Frame::Headers {
            stream: 1,
            end_stream: false,
            end_headers: true,
            ..
        }
    ));
    assert_eq!(
        frames[2],
        Frame::Data {
            stream: 1,
            end_stream: true,
            data: b"hello".to_vec(),
            flow_len: 5
        }
    );
    assert!(frames.contains(&Frame::Settings {
        ack: true,
        params: vec![]
    }));
    // The 5 received DATA bytes are given back to both windows.
    assert!(frames.contains(&Frame::WindowUpdate {
        stream: 0,
        increment: 5
    }));
    assert!(frames.contains(&Frame::WindowUpdate {
        stream: 1,
        increment: 5
    }));
    assert!(c.is_open() && c.check_idle(soon()));
}

#[test]
fn a_trailers_only_response_ends_on_its_headers() {
    let fields = [
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", "14"),
        ("grpc-message", "down%20for%20now"),
    ];
    let mut c = Script::default().headers(1, &fields, true).conn();
    let r = call(&mut c, b"x").unwrap();
    assert_eq!(text(&r.headers)[2], ("grpc-status".into(), "14".into()));
    assert!(r.body.is_empty() && r.trailers.is_empty());
}

#[test]
fn pings_are_answered_and_interim_responses_skipped() {
    let data = *b"12345678";
    let mut s = Script::default();
    frame::ping(&mut s.0, false, data);
    let mut c = s.headers(1, &[(":status", "100")], false).answer(1).conn();
    assert_eq!(call(&mut c, b"x").unwrap().status, 200);
    assert!(sent(&c).contains(&Frame::Ping { ack: true, data }));
}

#[test]
fn data_stays_within_the_peers_windows_and_frame_size() {
    let mut s = Script::default().settings(&[
        (frame::INITIAL_WINDOW_SIZE, 30_000),
        (frame::MAX_FRAME_SIZE, 20_000),
    ]);
    for (stream, inc) in [(0, 40_000), (1, 50_000), (0, 100_000), (1, 100_000)] {
        frame::window_update(&mut s.0, stream, inc);
    }
    let mut c = s.answer(1).conn();
    call(&mut c, &vec![7; 100_005]).unwrap();
    // 65,535 on the initial windows (frames of 16,384); the SETTINGS take
    // the stream window to -35,535; +50,000 leaves 14,465; then frames of
    // the new 20,000 maximum.
    let frames = sent(&c);
    assert_eq!(
        data_sizes(&frames),
        [16_384, 16_384, 16_384, 16_383, 14_465, 20_000, 5]
    );
    assert!(matches!(frames.last(), Some(Frame::WindowUpdate { .. })));
}

#[test]
fn an_early_answer_stops_the_upload() {
    let fields = [(":status", "200"), ("grpc-status", "8")];
    let mut c = Script::default().headers(1, &fields, true).conn();
    let r = call(&mut c, &vec![0; 100_000]).unwrap();
    assert_eq!(text(&r.headers)[1].1, "8");
    let frames = sent(&c);
    assert_eq!(data_sizes(&frames).iter().sum::<usize>(), 65_535);
    assert_eq!(
        frames.last(),
        Some(&Frame::RstStream {
            stream: 1,
            reason: Reason::CANCEL
        })
    );
    assert!(c.is_open());
}

#[test]
fn header_blocks_span_continuations_padding_and_priority() {
    let whole = block(HEAD);
    let mut s = Script::default();
    // HEADERS, padded (3) and with priority fields, holding one byte.
    let flags = frame::PADDED | frame::PRIORITY_FLAG;
    frame::head(&mut s.0, 1 + 5 + 1 + 3, frame::HEADERS, flags, 1);
    s.0.extend_from_slice(&[3, 0, 0, 0, 0, 16, whole[0], 0, 0, 0]);
    frame::head(&mut s.0, 1, frame::CONTINUATION, 0, 1);
    s.0.push(whole[1]);
    frame::head(
        &mut s.0,
        whole.len() - 2,
        frame::CONTINUATION,
        frame::END_HEADERS,
        1,
    );
    s.0.extend_from_slice(&whole[2..]);
    let mut c = s.data(1, &[0; 5], false).headers(1, OK, true).conn();
    let r = call(&mut c, b"x").unwrap();
    assert_eq!(text(&r.headers)[1].1, "application/grpc");
}

#[test]
fn the_dynamic_table_carries_across_responses() {
    // First response: a custom header added to the table (0x40 literal);
    // the second names it by index 62 only.
    let mut first = block(&[(":status", "200")]);
    first.extend_from_slice(&[0x40, 5]);
    first.extend_from_slice(b"x-srv");
    first.extend_from_slice(&[1, b'a']);
    let mut s = Script::default();
    frame::headers(&mut s.0, 1, &first, 16_384, false);
    let mut c = s.headers(1, OK, true).conn();
    call(&mut c, b"x").unwrap();
    assert!(c.check_idle(soon()));
    let mut second = Vec::new();
    frame::headers(&mut second, 3, &[0x88, 0x80 | 62], 16_384, false);
    c.io.input.extend(second);
    c.io.input.extend(Script::default().headers(3, OK, true).0);
    let r = call(&mut c, b"y").unwrap();
    assert_eq!(text(&r.headers)[1], ("x-srv".into(), "a".into()));
}

#[test]
fn an_idle_connection_notices_goaway_close_and_pings() {
    let mut c = Script::default().answer(1).conn();
    call(&mut c, b"x").unwrap();
    let data = *b"pingpong";
    frame::ping(&mut c.io.input, false, data);
    assert!(c.check_idle(soon()));
    assert!(sent(&c).contains(&Frame::Ping { ack: true, data }));
    frame::goaway(&mut c.io.input, 1, Reason::NO_ERROR);
    assert!(!c.check_idle(soon()));

    let mut c = Script::default().answer(1).conn();
    call(&mut c, b"x").unwrap();
    c.io.eof = true;
    assert!(!c.check_idle(soon()) && !c.is_open());

    // Pings without end: the check gives up at its budget.
    let mut c = Script::default().answer(1).conn();
    call(&mut c, b"x").unwrap();
    frame::ping(&mut c.io.endless, false, data);
    let start = Instant::now();
    assert!(!c.check_idle(soon()));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[path = "conn_refusals_tests.rs"]
mod refusals;
