//! Request decoder: parsing, framing, pipelining, keep-alive, 100-continue
//! and every rejection shape.

use proto::http::{Decoded, Limits, Method, Rejection, Request, RequestDecoder};

/// Feeds `bytes` in one go and polls until the decoder needs more or fails.
fn decode(bytes: &[u8], limits: Limits) -> (Vec<Decoded>, Option<Rejection>) {
    let mut d = RequestDecoder::new(limits);
    d.feed(bytes);
    drain(&mut d)
}

fn drain(d: &mut RequestDecoder) -> (Vec<Decoded>, Option<Rejection>) {
    let mut items = Vec::new();
    loop {
        match d.poll() {
            Ok(Some(item)) => items.push(item),
            Ok(None) => return (items, None),
            Err(r) => return (items, Some(r)),
        }
    }
}

/// Same, one byte at a time with a poll after every byte.
fn decode_bytewise(bytes: &[u8], limits: Limits) -> (Vec<Decoded>, Option<Rejection>) {
    let mut d = RequestDecoder::new(limits);
    let mut items = Vec::new();
    for b in bytes {
        d.feed(std::slice::from_ref(b));
        let (mut got, err) = drain(&mut d);
        items.append(&mut got);
        if err.is_some() {
            return (items, err);
        }
    }
    (items, None)
}

fn requests(items: Vec<Decoded>) -> Vec<Request> {
    items
        .into_iter()
        .filter_map(|i| match i {
            Decoded::Request(r) => Some(r),
            Decoded::ContinueExpected => None,
        })
        .collect()
}

fn one(bytes: &[u8]) -> Request {
    let (items, err) = decode(bytes, Limits::default());
    assert_eq!(err, None, "unexpected rejection");
    let mut reqs = requests(items);
    assert_eq!(reqs.len(), 1, "expected exactly one request");
    reqs.remove(0)
}

/// Asserts `bytes` is rejected with `status` whole and byte-by-byte, and
/// that the error is sticky.
#[track_caller]
fn rejects_with(bytes: &[u8], limits: Limits, status: u16) -> Rejection {
    let mut d = RequestDecoder::new(limits);
    d.feed(bytes);
    let (_, err) = drain(&mut d);
    let err = err.unwrap_or_else(|| panic!("expected {status}, got no rejection"));
    assert_eq!(err.status, status, "whole feed: {err:?}");
    assert_eq!(d.poll(), Err(err), "error must be sticky");
    d.feed(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(d.poll(), Err(err), "error must survive more input");
    assert!(!d.is_idle());
    let (_, err2) = decode_bytewise(bytes, limits);
    assert_eq!(err2, Some(err), "byte-wise feed must reject identically");
    err
}

#[track_caller]
fn rejects(bytes: &[u8], status: u16) -> Rejection {
    rejects_with(bytes, Limits::default(), status)
}

// ---------------------------------------------------------------- parsing

#[test]
fn limits_defaults() {
    let l = Limits::default();
    assert_eq!(l.max_head_bytes, 16 * 1024);
    assert_eq!(l.max_headers, 64);
    assert_eq!(l.max_body_bytes, 1_048_576);
    assert_eq!(l.max_line_bytes, 1_048_576);
}

#[test]
fn simple_get() {
    let r = one(b"GET /api/v1/sessions/x/events?limit=5&cursor=abc HTTP/1.1\r\nHost: a\r\nX-Thing:  v  \r\n\r\n");
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.target, "/api/v1/sessions/x/events?limit=5&cursor=abc");
    assert_eq!(r.path(), "/api/v1/sessions/x/events");
    assert_eq!(r.query(), Some("limit=5&cursor=abc"));
    assert_eq!(r.minor_version, 1);
    assert_eq!(
        r.headers.iter().collect::<Vec<_>>(),
        vec![("Host", &b"a"[..]), ("X-Thing", &b"v"[..])]
    );
    assert!(r.body.is_empty());
    assert!(r.keep_alive);
}

#[test]
fn header_lookup_is_case_insensitive_first_match() {
    let r = one(b"GET / HTTP/1.1\r\nX-A: 1\r\nx-a: 2\r\nAuthorization: Bearer k\r\n\r\n");
    assert_eq!(r.header("x-A"), Some(&b"1"[..]));
    assert_eq!(r.header("AUTHORIZATION"), Some(&b"Bearer k"[..]));
    assert_eq!(r.header("missing"), None);
}

#[test]
fn query_params_are_decoded() {
    let r = one(b"GET /p?a=1&b=hello+world&c=%41%2b%zz&d&e=&a=2&n%61me=x HTTP/1.1\r\n\r\n");
    assert_eq!(r.query_param("a").as_deref(), Some("1"));
    assert_eq!(r.query_param("b").as_deref(), Some("hello world"));
    assert_eq!(r.query_param("c").as_deref(), Some("A+%zz"));
    assert_eq!(r.query_param("d").as_deref(), Some(""));
    assert_eq!(r.query_param("e").as_deref(), Some(""));
    assert_eq!(r.query_param("name").as_deref(), Some("x"));
    assert_eq!(r.query_param("zz"), None);
    let r = one(b"GET /p HTTP/1.1\r\n\r\n");
    assert_eq!(r.query(), None);
    assert_eq!(r.query_param("a"), None);
    let r = one(b"GET /p? HTTP/1.1\r\n\r\n");
    assert_eq!(r.query(), Some(""));
    assert_eq!(r.path(), "/p");
}

#[test]
fn methods() {
    for (token, m) in [
        ("GET", Method::Get),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("HEAD", Method::Head),
        ("OPTIONS", Method::Options),
        ("PATCH", Method::Patch),
        ("PROPFIND", Method::Other("PROPFIND".into())),
        ("get", Method::Other("get".into())),
    ] {
        let r = one(format!("{token} / HTTP/1.1\r\n\r\n").as_bytes());
        assert_eq!(r.method, m);
        assert_eq!(r.method.as_str(), token);
    }
}

#[test]
fn content_length_body() {
    let r = one(b"POST /rpc HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world");
    assert_eq!(r.method, Method::Post);
    assert_eq!(r.body, b"hello world");
    let r = one(b"POST /rpc HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(r.body.is_empty());
    let r = one(b"POST /rpc HTTP/1.1\r\nContent-Length: 007\r\n\r\n1234567");
    assert_eq!(r.body, b"1234567");
}

#[test]
fn identical_duplicate_content_length_is_accepted() {
    let r = one(b"POST / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc");
    assert_eq!(r.body, b"abc");
}

#[test]
fn body_waits_for_all_bytes() {
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab");
    assert_eq!(d.poll(), Ok(None));
    assert!(!d.is_idle());
    assert_eq!(d.buffered(), 2);
    d.feed(b"cde");
    match d.poll() {
        Ok(Some(Decoded::Request(r))) => assert_eq!(r.body, b"abcde"),
        other => panic!("{other:?}"),
    }
    assert!(d.is_idle());
    assert_eq!(d.buffered(), 0);
    assert_eq!(d.poll(), Ok(None));
}

#[test]
fn chunked_body_with_extensions_and_trailers() {
    let raw = b"POST /rpc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value;flag\r\nhello\r\n\
        1 ; ext=\"q;x\"\r\n \r\n\
        00A\r\n0123456789\r\n\
        0;last\r\nX-Trailer: yes\r\nOther: 1\r\n\r\n";
    let r = one(raw);
    assert_eq!(r.body, b"hello 0123456789");
    assert_eq!(r.header("x-trailer"), None, "trailers are discarded");
    let (items, err) = decode_bytewise(raw, Limits::default());
    assert_eq!(err, None);
    assert_eq!(requests(items), vec![r]);
}

#[test]
fn chunked_empty_body_and_case_insensitive_te() {
    let r = one(b"POST / HTTP/1.1\r\nTransfer-Encoding: ChunKed\r\n\r\n0\r\n\r\n");
    assert!(r.body.is_empty());
}

#[test]
fn chunked_body_at_exact_limit() {
    let limits = Limits {
        max_body_bytes: 8,
        ..Limits::default()
    };
    let (items, err) = decode(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n4\r\nefgh\r\n0\r\n\r\n",
        limits,
    );
    assert_eq!(err, None);
    assert_eq!(requests(items)[0].body, b"abcdefgh");
    let (items, err) = decode(
        b"POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\nabcdefgh",
        limits,
    );
    assert_eq!(err, None);
    assert_eq!(requests(items)[0].body, b"abcdefgh");
}

/// One path may take a larger body (the admin port's session import);
/// every other path keeps the general limit, whatever its query string.
#[test]
fn one_path_takes_a_larger_body() {
    let limits = Limits {
        max_body_bytes: 4,
        ..Limits::default()
    };
    let run = |bytes: &[u8]| {
        let mut d = RequestDecoder::new(limits).with_large_body("/big", 8);
        d.feed(bytes);
        drain(&mut d)
    };
    let (items, err) = run(b"POST /big?x=1 HTTP/1.1\r\nContent-Length: 8\r\n\r\nabcdefgh");
    assert_eq!(err, None);
    assert_eq!(requests(items)[0].body, b"abcdefgh");
    let chunked = b"POST /big HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
        4\r\nabcd\r\n4\r\nefgh\r\n0\r\n\r\n";
    assert_eq!(run(chunked).1, None);
    let (_, err) = run(b"POST /big HTTP/1.1\r\nContent-Length: 9\r\n\r\n");
    assert_eq!(err.map(|r| r.status), Some(413));
    let (_, err) = run(b"POST /bigger HTTP/1.1\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(err.map(|r| r.status), Some(413));
    let (_, err) = run(b"POST /small HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n");
    assert_eq!(err.map(|r| r.status), Some(413));
}

// ------------------------------------------------------------- pipelining

#[test]
fn pipelined_requests_come_out_in_order() {
    let stream = b"GET /a HTTP/1.1\r\n\r\n\
        POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz\
        POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n\
        \r\n\
        DELETE /d HTTP/1.1\r\n\r\n\
        GET /partial HTTP/1.1\r\nHos";
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(stream);
    let mut paths = Vec::new();
    while let Ok(Some(Decoded::Request(r))) = d.poll() {
        paths.push((r.path().to_owned(), r.body));
    }
    assert_eq!(
        paths,
        vec![
            ("/a".to_owned(), vec![]),
            ("/b".to_owned(), b"xyz".to_vec()),
            ("/c".to_owned(), b"hi".to_vec()),
            ("/d".to_owned(), vec![]),
        ]
    );
    assert_eq!(d.buffered(), b"GET /partial HTTP/1.1\r\nHos".len());
    assert!(!d.is_idle());
    d.feed(b"t: x\r\n\r\n");
    match d.poll() {
        Ok(Some(Decoded::Request(r))) => assert_eq!(r.path(), "/partial"),
        other => panic!("{other:?}"),
    }
    assert!(d.is_idle());
}

#[test]
fn one_request_per_poll_leaves_rest_buffered() {
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    assert!(matches!(d.poll(), Ok(Some(Decoded::Request(r))) if r.path() == "/1"));
    assert_eq!(d.buffered(), 19);
    assert!(!d.is_idle());
    assert!(matches!(d.poll(), Ok(Some(Decoded::Request(r))) if r.path() == "/2"));
    assert_eq!(d.poll(), Ok(None));
    assert!(d.is_idle());
}

#[test]
fn leading_empty_lines_are_skipped() {
    let r = one(b"\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
    assert_eq!(r.path(), "/x");
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"\r\n");
    assert_eq!(d.poll(), Ok(None));
    assert!(d.is_idle());
}

#[test]
fn fresh_decoder_is_idle() {
    let d = RequestDecoder::new(Limits::default());
    assert!(d.is_idle());
    assert_eq!(d.buffered(), 0);
}

// ------------------------------------------------------------- keep-alive

#[test]
fn keep_alive_rules() {
    let cases: &[(&[u8], bool)] = &[
        (b"GET / HTTP/1.1\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        (
            b"GET / HTTP/1.1\r\nConnection: Keep-Alive, CLOSE\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nConnection: upgrade\r\nConnection: close\r\n\r\n",
            false,
        ),
        (b"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", true),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            false,
        ),
        (b"GET / HTTP/1.0\r\nConnection: close\r\n\r\n", false),
    ];
    for (raw, expected) in cases {
        let r = one(raw);
        assert_eq!(r.keep_alive, *expected, "{}", String::from_utf8_lossy(raw));
    }
    assert_eq!(one(b"GET / HTTP/1.0\r\n\r\n").minor_version, 0);
}

// ----------------------------------------------------------- 100-continue

#[test]
fn expect_continue_yields_once_before_request() {
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"POST /rpc HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n");
    assert_eq!(d.poll(), Ok(Some(Decoded::ContinueExpected)));
    assert_eq!(d.poll(), Ok(None));
    d.feed(b"ab");
    assert_eq!(d.poll(), Ok(None));
    d.feed(b"cd");
    match d.poll() {
        Ok(Some(Decoded::Request(r))) => assert_eq!(r.body, b"abcd"),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.poll(), Ok(None));
}

#[test]
fn expect_continue_not_needed_when_body_already_here() {
    let (items, err) = decode(
        b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
        Limits::default(),
    );
    assert_eq!(err, None);
    assert!(matches!(items.as_slice(), [Decoded::Request(_)]));
}

#[test]
fn expect_continue_not_for_empty_body_or_http10() {
    for raw in [
        &b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
    ] {
        let (items, _) = decode(raw, Limits::default());
        assert!(
            matches!(items.as_slice(), [Decoded::Request(_)]),
            "{items:?}"
        );
    }
    let (items, _) = decode(
        b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        Limits::default(),
    );
    assert!(items.is_empty());
}

#[test]
fn expect_continue_with_chunked_body() {
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(d.poll(), Ok(Some(Decoded::ContinueExpected)));
    d.feed(b"3\r\nabc\r\n0\r\n\r\n");
    assert!(matches!(d.poll(), Ok(Some(Decoded::Request(r))) if r.body == b"abc"));
}

#[test]
fn oversized_body_with_expect_is_rejected_without_continue() {
    let limits = Limits {
        max_body_bytes: 10,
        ..Limits::default()
    };
    let mut d = RequestDecoder::new(limits);
    d.feed(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n");
    assert_eq!(d.poll().map_err(|r| r.status), Err(413));
}

// ---------------------------------------------------------------- 400

#[test]
fn rejects_malformed_heads() {
    rejects(b"GET\r\n\r\n", 400);
    rejects(b"GET  / HTTP/1.1\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1 \r\n\r\n", 400);
    rejects(b"G(T / HTTP/1.1\r\n\r\n", 400);
    rejects(b"GET /a b HTTP/1.1\r\n\r\n", 400);
    rejects(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400);
    rejects(b"GET / HTTP/1.1\r\n\x00\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nNo-Colon\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\n: empty-name\r\n\r\n", 400);
}

#[test]
fn rejects_obs_fold() {
    rejects(b"GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nX-A: 1\r\n\tcontinued\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\n X-A: 1\r\n\r\n", 400);
}

#[test]
fn rejects_whitespace_before_colon() {
    rejects(b"GET / HTTP/1.1\r\nContent-Length : 0\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nX-A\t: 1\r\n\r\n", 400);
}

#[test]
fn rejects_bad_bytes_in_header_values() {
    rejects(b"GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nX-A: a\nb: c\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\r\nX-A: a\x7fb\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.1\nHost: a\n\n", 400);
    rejects(b"GET / HTTP/1.1\r\nHost: a\r\n\n", 400);
}

#[test]
fn rejects_content_length_with_transfer_encoding() {
    rejects(
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
    rejects(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        400,
    );
}

#[test]
fn rejects_differing_content_lengths() {
    let r = rejects(
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        400,
    );
    assert!(r.reason.contains("conflicting"));
    rejects(
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 03\r\n\r\nabc",
        400,
    );
}

#[test]
fn rejects_invalid_content_length() {
    for value in [
        "abc",
        "",
        "-1",
        "+1",
        "1,1",
        "1 1",
        "0x10",
        "1.0",
        "99999999999999999999999",
    ] {
        let raw = format!("POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
        let r = rejects(raw.as_bytes(), 400);
        assert!(r.reason.contains("Content-Length"), "{value:?}: {r:?}");
    }
}

#[test]
fn rejects_chunked_in_http10() {
    rejects(
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut v = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    v.extend_from_slice(body);
    v
}

#[test]
fn rejects_bad_chunk_size_lines() {
    for body in [
        &b"zz\r\n"[..],
        b"\r\n",
        b";ext\r\n",
        b"-1\r\n",
        b"0x5\r\n",
        b"5 junk\r\n",
        b"5\n",
        b"5\rx\n",
        b"5;ext\rx\r\n",
        b"5;ext\x00\r\n",
        b"5 \r\nhello\r\n0\r\n\r\n",
        b"10000000000000000\r\n",
        b"fffffffffffffffffffff\r\n",
    ] {
        rejects(&chunked(body), 400);
    }
    let long = [
        b"1;".to_vec(),
        vec![b'a'; 5000],
        b"\r\nx\r\n0\r\n\r\n".to_vec(),
    ]
    .concat();
    rejects(&chunked(&long), 400);
}

#[test]
fn rejects_missing_crlf_after_chunk_data() {
    rejects(&chunked(b"5\r\nhelloXX0\r\n\r\n"), 400);
    rejects(&chunked(b"5\r\nhello\rX0\r\n\r\n"), 400);
    rejects(&chunked(b"5\r\nhello\n0\r\n\r\n"), 400);
    rejects(&chunked(b"5\r\nhello 0\r\n\r\n"), 400);
}

#[test]
fn rejects_bad_trailers() {
    rejects(&chunked(b"0\r\nX-T: a\n\r\n"), 400);
    rejects(&chunked(b"0\r\n  folded\r\n\r\n"), 400);
    rejects(&chunked(b"0\r\nX-T: a\x00\r\n\r\n"), 400);
    rejects(&chunked(b"0\r\nno colon\r\n\r\n"), 400);
    rejects(&chunked(b"0\r\n\n"), 400);
}

#[test]
fn rejects_malformed_versions_with_400() {
    rejects(b"GET / HTTX/1.1\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.x\r\n\r\n", 400);
    rejects(b"GET / HTTP/1-1\r\n\r\n", 400);
    rejects(b"GET / HTTP/x.1\r\n\r\n", 400);
    rejects(b"GET / http/1.1\r\n\r\n", 400);
    rejects(b"GET / HTTP/1.10\r\n\r\n", 400);
    rejects(b"GET /\r\n\r\n", 400);
}

// ---------------------------------------------------------------- 501

#[test]
fn rejects_unsupported_transfer_codings() {
    for te in [
        "gzip, chunked",
        "identity",
        "chunked, gzip",
        "gzip",
        "chunked;q=1",
        "chunked,",
        "",
    ] {
        let raw = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n0\r\n\r\n");
        rejects(raw.as_bytes(), 501);
    }
    rejects(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        501,
    );
}

// ---------------------------------------------------------------- 505

#[test]
fn rejects_unsupported_versions() {
    for v in [
        "HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "HTTP/3.0", "HTTP/1.9", "HTTP/2",
    ] {
        let raw = format!("GET / {v}\r\n\r\n");
        rejects(raw.as_bytes(), 505);
    }
    rejects(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505);
}

// ---------------------------------------------------------------- 413

#[test]
fn rejects_oversized_content_length_before_body() {
    let limits = Limits {
        max_body_bytes: 100,
        ..Limits::default()
    };
    let mut d = RequestDecoder::new(limits);
    d.feed(b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n");
    assert_eq!(d.poll().map_err(|r| r.status), Err(413));
    rejects_with(
        b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n",
        limits,
        413,
    );
    rejects(b"POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n", 413);
    rejects(
        b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n",
        413,
    );
}

#[test]
fn rejects_oversized_chunked_body_as_soon_as_size_is_known() {
    let limits = Limits {
        max_body_bytes: 10,
        ..Limits::default()
    };
    let mut d = RequestDecoder::new(limits);
    d.feed(&chunked(b"6\r\nabcdef\r\n5\r\n"));
    assert_eq!(d.poll().map_err(|r| r.status), Err(413));
    rejects_with(
        &chunked(b"6\r\nabcdef\r\n5\r\nabcde\r\n0\r\n\r\n"),
        limits,
        413,
    );
    rejects(&chunked(b"100001\r\n"), 413);
    rejects(&chunked(b"ffffffffffffffff\r\n"), 413);
}

// ---------------------------------------------------------------- 431

#[test]
fn rejects_oversized_head() {
    let limits = Limits {
        max_head_bytes: 64,
        ..Limits::default()
    };
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(100));
    rejects_with(big.as_bytes(), limits, 431);
    // Detected without the end of the head ever arriving.
    let partial = format!("GET / HTTP/1.1\r\nX-Big: {}", "a".repeat(100));
    rejects_with(partial.as_bytes(), limits, 431);
    let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
    rejects_with(long_line.as_bytes(), limits, 431);
    rejects_with(&b"\r\n".repeat(40), limits, 431);
    // Default limit: 16 KiB.
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(16 * 1024));
    rejects(big.as_bytes(), 431);
}

#[test]
fn head_exactly_at_limit_is_accepted() {
    let raw = b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n";
    let limits = Limits {
        max_head_bytes: raw.len(),
        ..Limits::default()
    };
    let (items, err) = decode(raw, limits);
    assert_eq!(err, None);
    assert_eq!(items.len(), 1);
    let (items, err) = decode_bytewise(raw, limits);
    assert_eq!(err, None);
    assert_eq!(items.len(), 1);
    rejects_with(
        raw,
        Limits {
            max_head_bytes: raw.len() - 1,
            ..limits
        },
        431,
    );
}

#[test]
fn rejects_too_many_headers() {
    let limits = Limits {
        max_headers: 4,
        ..Limits::default()
    };
    let ok = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    let (items, err) = decode(ok, limits);
    assert_eq!((items.len(), err), (1, None));
    let too_many = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n";
    rejects_with(too_many, limits, 431);
    let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..65 {
        raw.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    rejects(&raw, 431);
}

#[test]
fn rejects_oversized_trailers() {
    let limits = Limits {
        max_head_bytes: 64,
        ..Limits::default()
    };
    let trailers = format!("0\r\nX-T: {}\r\n\r\n", "a".repeat(80));
    rejects_with(&chunked(trailers.as_bytes()), limits, 431);
}

#[test]
fn rejection_is_sticky_and_drops_buffer() {
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(b"BROKEN\r\n\r\nGET / HTTP/1.1\r\n\r\n");
    let err = d.poll().unwrap_err();
    assert_eq!(err.status, 400);
    for _ in 0..3 {
        assert_eq!(d.poll(), Err(err));
    }
    assert_eq!(d.buffered(), 0);
    assert!(!d.is_idle());
}
