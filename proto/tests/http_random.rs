//! Deterministic randomized tests for the request decoder: split
//! independence on valid pipelined streams, and no panic / termination /
//! split independence on mutated and random input. A tiny xorshift PRNG
//! with fixed seeds keeps every run identical.

use proto::http::{Decoded, Limits, Method, Rejection, Request, RequestDecoder};

/// xorshift64* — deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn string_from(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len).map(|_| *self.pick(alphabet) as char).collect()
    }
}

const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "PROPFIND",
];
const HEADER_NAMES: &[&str] = &[
    "Host",
    "Authorization",
    "Accept",
    "User-Agent",
    "X-Trace-Id",
    "x-lower",
    "X_Odd!#",
];
const PATH_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-._~%";
const VALUE_CHARS: &[u8] = b"abcdefXYZ0123456789 ;,=/-_.:\"()\t";

/// One valid request and the value the decoder must produce for it.
fn gen_request(rng: &mut Rng) -> (Vec<u8>, Request) {
    let minor: u8 = if rng.chance(80) { 1 } else { 0 };
    let method = *rng.pick(METHODS);
    let mut path = String::from("/");
    for i in 0..rng.below(5) {
        if i > 0 {
            path.push('/');
        }
        let len = rng.range(1, 12);
        path.push_str(&rng.string_from(PATH_CHARS, len));
    }
    let query = rng.chance(40).then(|| {
        let n = rng.range(1, 3);
        (0..n)
            .map(|i| format!("k{i}={}", rng.string_from(b"ab+%20c", 4)))
            .collect::<Vec<_>>()
            .join("&")
    });
    let target = match &query {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };

    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    for _ in 0..rng.below(6) {
        let name = rng.pick(HEADER_NAMES).to_string();
        let len = rng.range(1, 30);
        let mut value = rng.string_from(VALUE_CHARS, len);
        value = value.trim_matches(|c| c == ' ' || c == '\t').to_owned();
        headers.push((name, value.into_bytes()));
    }
    let connection = match rng.below(4) {
        0 => Some("close"),
        1 => Some("keep-alive"),
        2 => Some("Keep-Alive, Upgrade"),
        _ => None,
    };
    if let Some(c) = connection {
        headers.push(("Connection".into(), c.as_bytes().to_vec()));
    }
    let keep_alive = match (minor, connection) {
        (1, Some("close")) => false,
        (1, _) => true,
        (_, Some("close")) | (_, None) => false,
        (_, Some(_)) => true,
    };

    let body_len = if rng.chance(50) { rng.below(300) } else { 0 };
    let body: Vec<u8> = (0..body_len).map(|_| rng.next() as u8).collect();
    let chunked = minor == 1 && rng.chance(40);
    if rng.chance(15) && minor == 1 {
        headers.push(("Expect".into(), b"100-continue".to_vec()));
    }
    let mut framed_body = Vec::new();
    if chunked {
        headers.push(("Transfer-Encoding".into(), b"chunked".to_vec()));
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = rng.range(1, 64).min(rest.len());
            let size = match rng.below(3) {
                0 => format!("{n:x}"),
                1 => format!("{n:X}"),
                _ => format!("00{n:x}"),
            };
            framed_body.extend_from_slice(size.as_bytes());
            if rng.chance(20) {
                framed_body.extend_from_slice(b";ext=\"v;1\"");
            }
            framed_body.extend_from_slice(b"\r\n");
            framed_body.extend_from_slice(&rest[..n]);
            framed_body.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        framed_body.extend_from_slice(b"0\r\n");
        if rng.chance(30) {
            framed_body.extend_from_slice(b"X-Checksum: abc\r\nX-More: 1 2\r\n");
        }
        framed_body.extend_from_slice(b"\r\n");
    } else if body_len > 0 || rng.chance(30) {
        headers.push(("Content-Length".into(), body_len.to_string().into_bytes()));
        framed_body.extend_from_slice(&body);
    }
    // Shuffle header order a little (framing headers need not be last).
    if headers.len() > 1 && rng.chance(50) {
        let (a, b) = (rng.below(headers.len()), rng.below(headers.len()));
        headers.swap(a, b);
    }

    let mut raw = format!("{method} {target} HTTP/1.{minor}\r\n").into_bytes();
    for (name, value) in &headers {
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice(if rng.chance(50) { b": " } else { b":" });
        raw.extend_from_slice(value);
        if rng.chance(10) {
            raw.push(b' ');
        }
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(&framed_body);

    let headers = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let request = Request::new(
        Method::from_token(method),
        target,
        minor,
        headers,
        body,
        keep_alive,
    );
    (raw, request)
}

fn gen_stream(rng: &mut Rng) -> (Vec<u8>, Vec<Request>) {
    let mut raw = Vec::new();
    let mut expected = Vec::new();
    for _ in 0..rng.range(1, 4) {
        if rng.chance(10) {
            raw.extend_from_slice(b"\r\n");
        }
        let (bytes, req) = gen_request(rng);
        raw.extend_from_slice(&bytes);
        expected.push(req);
    }
    (raw, expected)
}

/// Everything observable after feeding a stream: the requests, the final
/// error, and the buffered/idle state when no error occurred.
#[derive(Debug, PartialEq)]
struct Outcome {
    requests: Vec<Request>,
    error: Option<Rejection>,
    buffered: usize,
    idle: bool,
}

/// Feeds `raw` in pieces whose lengths come from `split`, polling after
/// each; asserts termination and well-formed ContinueExpected placement.
fn run(raw: &[u8], limits: Limits, mut split: impl FnMut(usize) -> usize) -> Outcome {
    let mut d = RequestDecoder::new(limits);
    let mut requests = Vec::new();
    let mut error = None;
    let mut continue_open = false;
    let mut polls = 0usize;
    let mut at = 0;
    'feed: while at < raw.len() {
        let n = split(raw.len() - at).clamp(1, raw.len() - at);
        d.feed(&raw[at..at + n]);
        at += n;
        loop {
            polls += 1;
            assert!(polls <= 4 * raw.len() + 16, "decoder does not terminate");
            match d.poll() {
                Ok(Some(Decoded::Request(r))) => {
                    continue_open = false;
                    requests.push(r);
                }
                Ok(Some(Decoded::ContinueExpected)) => {
                    assert!(!continue_open, "ContinueExpected twice for one request");
                    continue_open = true;
                }
                Ok(None) => break,
                Err(r) => {
                    assert_eq!(d.poll(), Err(r), "rejection must be sticky");
                    error = Some(r);
                    break 'feed;
                }
            }
        }
    }
    Outcome {
        requests,
        error,
        buffered: if error.is_some() { 0 } else { d.buffered() },
        idle: d.is_idle(),
    }
}

fn random_limits(rng: &mut Rng) -> Limits {
    if rng.chance(50) {
        Limits::default()
    } else {
        Limits {
            max_head_bytes: rng.range(0, 400),
            max_headers: rng.range(0, 8),
            max_body_bytes: rng.range(0, 300),
            ..Limits::default()
        }
    }
}

fn random_splitter(rng: &mut Rng) -> impl FnMut(usize) -> usize + '_ {
    let mode = rng.below(4);
    move |left| match mode {
        0 => 1,
        1 => rng.range(1, 3),
        2 => rng.range(1, 40),
        _ => rng.range(1, left),
    }
}

#[test]
fn valid_streams_reassemble_identically_under_any_split() {
    let mut rng = Rng::new(0xBAE5_E55E);
    for i in 0..6_000 {
        let (raw, expected) = gen_stream(&mut rng);
        let whole = run(&raw, Limits::default(), |left| left);
        assert_eq!(
            whole.error,
            None,
            "iteration {i}: {:?}",
            String::from_utf8_lossy(&raw)
        );
        assert_eq!(whole.requests, expected, "iteration {i}");
        assert!(whole.idle && whole.buffered == 0, "iteration {i}");
        let mut split_rng = Rng::new(i);
        let split = run(&raw, Limits::default(), random_splitter(&mut split_rng));
        assert_eq!(
            split,
            whole,
            "iteration {i}: {:?}",
            String::from_utf8_lossy(&raw)
        );
    }
}

fn mutate(rng: &mut Rng, raw: &mut Vec<u8>) {
    const SPECIAL: &[u8] = b"\r\n \t\0:;0fF,\x7f\xff\"9-";
    for _ in 0..rng.range(1, 4) {
        if raw.is_empty() {
            raw.push(*rng.pick(SPECIAL));
            continue;
        }
        let at = rng.below(raw.len());
        match rng.below(6) {
            0 => raw[at] = rng.next() as u8,
            1 => raw[at] = *rng.pick(SPECIAL),
            2 => raw.insert(at, *rng.pick(SPECIAL)),
            3 => {
                raw.remove(at);
            }
            4 => {
                let end = (at + rng.range(1, 20)).min(raw.len());
                let copy = raw[at..end].to_vec();
                let to = rng.below(raw.len());
                raw.splice(to..to, copy);
            }
            _ => raw.truncate(at),
        }
    }
}

#[test]
fn mutated_streams_never_panic_and_decode_split_independently() {
    let mut rng = Rng::new(0xF00D);
    let mut rejected = 0usize;
    for i in 0..10_000 {
        let (mut raw, _) = gen_stream(&mut rng);
        mutate(&mut rng, &mut raw);
        let limits = random_limits(&mut rng);
        let whole = run(&raw, limits, |left| left);
        rejected += usize::from(whole.error.is_some());
        let mut split_rng = Rng::new(i ^ 0x5EED);
        let split = run(&raw, limits, random_splitter(&mut split_rng));
        assert_eq!(
            split,
            whole,
            "iteration {i}: {:?} {limits:?}",
            String::from_utf8_lossy(&raw)
        );
    }
    // The mutations must actually exercise the rejection paths.
    assert!(rejected > 2_000, "only {rejected} rejections");
}

#[test]
fn random_bytes_never_panic_and_decode_split_independently() {
    let mut rng = Rng::new(0xDEAD_BEEF);
    const ALPHABET: &[u8] = b"GET POST/ HTTP/1.1\r\n:;0123456789abcdefABCDEF\t\0\x7f\xffContent-Length Transfer-Encoding chunked";
    for i in 0..4_000 {
        let len = rng.below(200);
        let raw: Vec<u8> = if rng.chance(50) {
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut v = b"POST / HTTP/1.1\r\n".to_vec();
            v.extend((0..len).map(|_| *rng.pick(ALPHABET)));
            v
        };
        let limits = random_limits(&mut rng);
        let whole = run(&raw, limits, |left| left);
        let mut split_rng = Rng::new(i);
        let split = run(&raw, limits, random_splitter(&mut split_rng));
        assert_eq!(
            split,
            whole,
            "iteration {i}: {:?} {limits:?}",
            String::from_utf8_lossy(&raw)
        );
    }
}
