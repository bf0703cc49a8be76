use super::*;
use crate::http::{encode_chunk, encode_response, encode_stream_head, LAST_CHUNK};

/// Feeds `bytes` in pieces of `piece` bytes, polling after each, then
/// (when `eof`) finishes; consecutive `Data` events are merged.
fn run(
    mut dec: ResponseDecoder,
    bytes: &[u8],
    piece: usize,
    eof: bool,
) -> Result<Vec<ResponseEvent>, ResponseError> {
    let mut out: Vec<ResponseEvent> = Vec::new();
    let push = |ev: ResponseEvent, out: &mut Vec<ResponseEvent>| match (out.last_mut(), ev) {
        (Some(ResponseEvent::Data(prev)), ResponseEvent::Data(d)) => prev.extend_from_slice(&d),
        (_, ev) => out.push(ev),
    };
    for part in bytes.chunks(piece.max(1)) {
        dec.feed(part);
        while let Some(ev) = dec.poll()? {
            push(ev, &mut out);
        }
    }
    if eof {
        dec.finish();
        while let Some(ev) = dec.poll()? {
            push(ev, &mut out);
        }
    }
    Ok(out)
}

fn strict(bytes: &[u8]) -> Result<Vec<ResponseEvent>, ResponseError> {
    run(ResponseDecoder::new(), bytes, bytes.len(), false)
}

fn lenient(bytes: &[u8]) -> Result<Vec<ResponseEvent>, ResponseError> {
    run(ResponseDecoder::lenient(), bytes, bytes.len(), false)
}

fn head(status: u16, reason: &str, headers: &[(&str, &str)], framing: Framing) -> ResponseEvent {
    ResponseEvent::Head(ResponseHead {
        status,
        reason: reason.into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        framing,
    })
}

fn data(d: &[u8]) -> ResponseEvent {
    ResponseEvent::Data(d.to_vec())
}

fn end() -> ResponseEvent {
    ResponseEvent::End {
        trailers: Vec::new(),
    }
}

#[test]
fn content_length_byte_at_a_time() {
    let bytes = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
    let want = vec![
        head(
            201,
            "Created",
            &[
                ("content-type", "application/json"),
                ("content-length", "7"),
            ],
            Framing::Length(7),
        ),
        data(b"{\"a\":1}"),
        end(),
    ];
    for piece in 1..=bytes.len() {
        assert_eq!(
            run(ResponseDecoder::new(), bytes, piece, false).unwrap(),
            want,
            "piece {piece}"
        );
    }
}

#[test]
fn body_data_is_delivered_as_it_arrives() {
    let mut dec = ResponseDecoder::new();
    dec.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    assert!(matches!(dec.poll(), Ok(Some(ResponseEvent::Head(_)))));
    assert_eq!(dec.poll(), Ok(Some(data(b"abc"))));
    assert_eq!(dec.poll(), Ok(None));
    dec.feed(b"defghij");
    assert_eq!(dec.poll(), Ok(Some(data(b"defghij"))));
    assert_eq!(dec.poll(), Ok(Some(end())));
    assert_eq!(dec.poll(), Ok(None));
}

#[test]
fn ndjson_stream_yields_each_chunk_before_the_end() {
    let mut dec = ResponseDecoder::new();
    dec.feed(&encode_stream_head(200, "application/x-ndjson", false));
    let Ok(Some(ResponseEvent::Head(h))) = dec.poll() else {
        panic!("no head");
    };
    assert_eq!(h.framing, Framing::Chunked);
    assert_eq!(h.header("Transfer-Encoding"), Some("chunked"));
    for line in [&b"{\"n\":1}\n"[..], b"\n", b"{\"n\":2}\n"] {
        let mut chunk = Vec::new();
        encode_chunk(line, &mut chunk);
        dec.feed(&chunk);
        assert_eq!(dec.poll(), Ok(Some(data(line))));
        assert_eq!(dec.poll(), Ok(None), "the stream stays open");
    }
    dec.feed(LAST_CHUNK);
    assert_eq!(dec.poll(), Ok(Some(end())));
}

#[test]
fn chunked_with_extensions_and_trailers_any_split() {
    let bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
5;ext=1\r\nhello\r\n1 ; a=\"b;c\"\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\nX-Other:\tu \r\n\r\n";
    let want = vec![
        head(
            200,
            "OK",
            &[("transfer-encoding", "chunked")],
            Framing::Chunked,
        ),
        data(b"hello 0123456789"),
        ResponseEvent::End {
            trailers: vec![
                ("x-trailer".into(), "t".into()),
                ("x-other".into(), "u".into()),
            ],
        },
    ];
    for piece in 1..=bytes.len() {
        for mode in [Mode::Strict, Mode::Lenient] {
            assert_eq!(
                run(ResponseDecoder::with_mode(mode), bytes, piece, true).unwrap(),
                want,
                "piece {piece} {mode:?}"
            );
        }
    }
}

#[test]
fn malformed_crlf_is_rejected() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let cases: &[&str] = &[
        // Data not followed by CRLF.
        "2\r\nabXY",
        "2\r\nab\rX",
        // Bare LF after the data, after the size, in the trailer.
        "2\r\nab\n0\r\n\r\n",
        "2\nab\r\n0\r\n\r\n",
        "0\r\nx: 1\n\r\n",
        "0\r\n\n",
        // Stray CR inside a size line.
        "2\r\r\nab\r\n",
    ];
    for c in cases {
        let bytes = format!("{chunked}{c}");
        assert!(
            matches!(strict(bytes.as_bytes()), Err(ResponseError::Chunk(_))),
            "{c:?}: {:?}",
            strict(bytes.as_bytes())
        );
    }
    // Lenient accepts bare LF endings, not garbage after the data.
    let ok = format!("{chunked}2\nab\n0\n\n");
    assert_eq!(lenient(ok.as_bytes()).unwrap().len(), 3);
    let bad = format!("{chunked}2\r\nabXY");
    assert!(lenient(bad.as_bytes()).is_err());
    // Head lines too.
    for h in [
        "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n",
        "HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n",
        "\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    ] {
        assert!(
            matches!(strict(h.as_bytes()), Err(ResponseError::Head(_))),
            "{h:?}"
        );
    }
    let ok = lenient(b"\r\nHTTP/1.1 200 OK\nContent-Length: 0\n\n").unwrap();
    assert_eq!(ok.len(), 2);
}

#[test]
fn bad_chunk_sizes() {
    for size in [
        "zz",
        "",
        "-1",
        "+5",
        "5 x",
        "5 ",
        "10000000000000000",
        "00000000000000001",
        "5;\u{1}",
    ] {
        let bytes = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\n");
        assert!(
            matches!(strict(bytes.as_bytes()), Err(ResponseError::Chunk(_))),
            "{size:?}"
        );
    }
    // The largest 16-digit size parses (and waits for its data).
    let bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab";
    assert_eq!(strict(bytes).unwrap().last(), Some(&data(b"ab")));
    let long = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;{}",
        "x".repeat(5000)
    );
    assert!(matches!(
        strict(long.as_bytes()),
        Err(ResponseError::Chunk(_))
    ));
}

#[test]
fn oversize_head_and_trailers() {
    let big = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n",
        "a".repeat(200)
    );
    let small = || ResponseDecoder::new().max_head_bytes(128);
    for piece in [1, 7, big.len()] {
        assert_eq!(
            run(small(), big.as_bytes(), piece, false),
            Err(ResponseError::HeadTooLarge { limit: 128 }),
            "piece {piece}"
        );
    }
    // No line ending at all: rejected once over the limit, not buffered on.
    let mut dec = small();
    dec.feed(&[b'a'; 100]);
    assert_eq!(dec.poll(), Ok(None));
    dec.feed(&[b'a'; 100]);
    assert_eq!(dec.poll(), Err(ResponseError::HeadTooLarge { limit: 128 }));
    // Exactly at the limit is fine.
    let exact = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let dec = ResponseDecoder::new().max_head_bytes(exact.len());
    assert_eq!(run(dec, exact, 1, false).unwrap().len(), 2);
    let dec = ResponseDecoder::new().max_head_bytes(exact.len() - 1);
    assert!(run(dec, exact, 1, false).is_err());
    // Trailers count against the same limit.
    let trailers = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: {}\r\n\r\n",
        "t".repeat(200)
    );
    assert_eq!(
        run(small(), trailers.as_bytes(), 5, false),
        Err(ResponseError::HeadTooLarge { limit: 128 })
    );
}

#[test]
fn pipelined_responses_any_split() {
    let mut bytes = encode_response(200, Some("application/json"), &[], b"{}", false);
    bytes.extend(b"HTTP/1.1 100 Continue\r\n\r\n");
    bytes.extend(encode_response(204, None, &[], b"", false));
    bytes.extend(encode_stream_head(200, "application/x-ndjson", false));
    encode_chunk(b"{\"x\":1}\n", &mut bytes);
    bytes.extend(LAST_CHUNK);
    bytes.extend(encode_response(304, None, &[("ETag", "\"e\"")], b"", false));
    bytes.extend(encode_response(404, None, &[], b"nope", true));
    let mut want = Vec::new();
    for piece in 1..=bytes.len() {
        let got = run(ResponseDecoder::new(), &bytes, piece, true).unwrap();
        if piece == 1 {
            want = got.clone();
        }
        assert_eq!(got, want, "piece {piece}");
    }
    let summary: Vec<String> = want
        .iter()
        .map(|e| match e {
            ResponseEvent::Head(h) => format!("head {} {:?}", h.status, h.framing),
            ResponseEvent::Data(d) => String::from_utf8_lossy(d).into_owned(),
            ResponseEvent::End { .. } => "end".into(),
        })
        .collect();
    assert_eq!(
        summary,
        [
            "head 200 Length(2)",
            "{}",
            "end",
            "head 204 Empty",
            "end",
            "head 200 Chunked",
            "{\"x\":1}\n",
            "end",
            "head 304 Empty",
            "end",
            "head 404 Length(4)",
            "nope",
            "end"
        ]
    );
}

#[test]
fn rest_after_end_is_kept() {
    let mut dec = ResponseDecoder::new();
    dec.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 2");
    assert!(matches!(dec.poll(), Ok(Some(ResponseEvent::Head(_)))));
    assert_eq!(dec.poll(), Ok(Some(data(b"x"))));
    assert_eq!(dec.poll(), Ok(Some(end())));
    assert_eq!(dec.buffered(), b"HTTP/1.1 2");
    assert_eq!(dec.poll(), Ok(None));
    assert_eq!(dec.take_buffered(), b"HTTP/1.1 2");
    assert!(dec.buffered().is_empty());
    dec.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert!(matches!(dec.poll(), Ok(Some(ResponseEvent::Head(_)))));
}

#[test]
fn head_request_and_bodyless_statuses() {
    let mut dec = ResponseDecoder::new();
    dec.set_head_request(true);
    dec.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
    dec.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    let Ok(Some(ResponseEvent::Head(h))) = dec.poll() else {
        panic!("head");
    };
    assert_eq!((h.status, h.framing), (200, Framing::Empty));
    assert_eq!(dec.poll(), Ok(Some(end())));
    // Reset after that head: the next response has its body.
    let Ok(Some(ResponseEvent::Head(h))) = dec.poll() else {
        panic!("head");
    };
    assert_eq!(h.framing, Framing::Chunked);
    assert_eq!(dec.poll(), Ok(Some(end())));
    // A HEAD answer need not be framed, even strictly.
    let mut dec = ResponseDecoder::new();
    dec.set_head_request(true);
    assert_eq!(
        run(dec, b"HTTP/1.1 200 OK\r\n\r\n", 1, true).unwrap().len(),
        2
    );
    // 304 may carry the representation's Content-Length, not a body.
    let ok = strict(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").unwrap();
    assert_eq!(ok.get(1), Some(&end()));
    // 204 and 1xx never carry framing fields (strict).
    for bad in [
        "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\n",
    ] {
        assert!(
            matches!(strict(bad.as_bytes()), Err(ResponseError::Framing(_))),
            "{bad:?}"
        );
        assert!(lenient(bad.as_bytes()).is_ok(), "{bad:?}");
    }
}

#[test]
fn interim_responses_are_skipped_and_101_refused() {
    let got = strict(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(
        got,
        vec![
            head(200, "OK", &[("content-length", "0")], Framing::Length(0)),
            end()
        ]
    );
    assert!(matches!(
        lenient(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"),
        Err(ResponseError::Framing(_))
    ));
}

#[test]
fn strict_framing_rules() {
    let framing_errors = [
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        "HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
        "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    ];
    for bad in framing_errors {
        assert!(
            matches!(strict(bad.as_bytes()), Err(ResponseError::Framing(_))),
            "{bad:?}: {:?}",
            strict(bad.as_bytes())
        );
    }
    // Lenient: chunked overrides the length, equal duplicates agree, and
    // an unframed body runs until close.
    let got = lenient(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(got.get(1), Some(&data(b"z")));
    let got =
        lenient(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\nContent-Length: 1\r\n\r\nx").unwrap();
    assert_eq!(got.last(), Some(&end()));
    assert!(lenient(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx").is_err());
    assert!(lenient(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").is_err());
    let bytes = b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\nuntil the end";
    for piece in 1..bytes.len() {
        let got = run(ResponseDecoder::lenient(), bytes, piece, true).unwrap();
        assert_eq!(got.get(1), Some(&data(b"until the end")), "piece {piece}");
        assert_eq!(got.get(2), Some(&end()));
    }
}

#[test]
fn strict_head_syntax() {
    let head_errors = [
        "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 600 X\r\nContent-Length: 0\r\n\r\n",
        "http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\n Content-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nNo colon\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: empty\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\u{1}b\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 O\u{0}K\r\nContent-Length: 0\r\n\r\n",
    ];
    for bad in head_errors {
        assert!(
            matches!(strict(bad.as_bytes()), Err(ResponseError::Head(_))),
            "{bad:?}: {:?}",
            strict(bad.as_bytes())
        );
    }
    // Lenient takes the old version, a missing reason, padded names and
    // folded values.
    let got = lenient(b"HTTP/1.0 200\r\nX : a\r\n b\r\nContent-Length: 0\r\n\r\n").unwrap();
    assert_eq!(
        got.first(),
        Some(&head(
            200,
            "",
            &[("x", "a b"), ("content-length", "0")],
            Framing::Length(0)
        ))
    );
    // Values keep inner whitespace, lose the surrounding OWS; obs-text is
    // allowed.
    let got = strict(
        b"HTTP/1.1 200 OK\r\nX-A:  a \tb\t \r\nX-B: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    let Some(ResponseEvent::Head(h)) = got.first() else {
        panic!("head");
    };
    assert_eq!(h.header("x-a"), Some("a \tb"));
    assert_eq!(h.header("X-B"), Some("café"));
}

#[test]
fn truncation_is_an_error_and_errors_stick() {
    for cut in [
        "HTTP/1.1 200 OK\r\nContent-Le",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
    ] {
        assert!(
            matches!(
                run(ResponseDecoder::new(), cut.as_bytes(), 3, true),
                Err(ResponseError::Truncated(_))
            ),
            "{cut:?}"
        );
    }
    // A close between responses is clean.
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(run(ResponseDecoder::new(), ok, 1, true).unwrap().len(), 2);
    let mut dec = ResponseDecoder::new();
    assert!(!dec.is_finished());
    dec.finish();
    assert!(dec.is_finished());
    assert_eq!(dec.poll(), Ok(None));
    let mut dec = ResponseDecoder::new();
    dec.feed(b"HTTP/9 200 OK\r\n\r\n");
    let err = dec.poll().unwrap_err();
    dec.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(dec.poll(), Err(err));
}

#[test]
fn large_bodies_and_backlogs_stream_through() {
    // A long chunked stream fed in odd pieces: every byte comes out once,
    // in order, and the internal buffer is compacted along the way.
    let mut bytes = encode_stream_head(200, "application/x-ndjson", false);
    let mut body = Vec::new();
    for i in 0..2_000 {
        let line = format!("{{\"seq\":{i}}}\n");
        encode_chunk(line.as_bytes(), &mut bytes);
        body.extend_from_slice(line.as_bytes());
    }
    bytes.extend(LAST_CHUNK);
    for piece in [1, 13, 4096, bytes.len()] {
        let got = run(ResponseDecoder::new(), &bytes, piece, false).unwrap();
        assert_eq!(
            got.get(1),
            Some(&ResponseEvent::Data(body.clone())),
            "piece {piece}"
        );
        assert_eq!(got.len(), 3);
    }
    let big = vec![b'x'; 100_000];
    let bytes = encode_response(200, None, &[], &big, false);
    let got = run(ResponseDecoder::new(), &bytes, 777, false).unwrap();
    assert_eq!(got.get(1), Some(&ResponseEvent::Data(big)));
}

#[test]
fn the_servers_own_output_decodes_strictly() {
    use crate::http::{encode_rejection, Rejection};
    for status in [
        200, 201, 202, 204, 304, 400, 401, 404, 408, 413, 429, 500, 503,
    ] {
        let bytes = encode_response(
            status,
            Some("application/json"),
            &[("X-Id", "1")],
            b"{}",
            status == 503,
        );
        let got = strict(&bytes).unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(got.last(), Some(&end()), "{status}");
    }
    let r = Rejection {
        status: 431,
        reason: "too big",
    };
    assert!(strict(&encode_rejection(&r)).is_ok());
}

/// Mutated and random streams: no panic, and the same events and the same
/// kind of error whether fed whole or in random pieces (xorshift, fixed
/// seed).
#[test]
fn random_streams_are_split_independent() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut valid = encode_response(200, Some("application/json"), &[("X-A", "b")], b"{}", false);
    valid.extend(encode_stream_head(200, "application/x-ndjson", false));
    for line in ["{\"a\":1}\n", "\n", "{\"b\":2}\n"] {
        encode_chunk(line.as_bytes(), &mut valid);
    }
    valid.extend(b"0\r\nX-T: 1\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n");
    valid.extend(encode_response(404, None, &[], b"nope", true));
    let alphabet = b"\r\n :;0123456789abcdefHTP/.\t\x00\xff";
    let outcome =
        |r: Result<Vec<ResponseEvent>, ResponseError>| r.map_err(|e| std::mem::discriminant(&e));
    for i in 0..3_000 {
        let mut bytes = valid.clone();
        if i % 10 == 9 {
            bytes = (0..next() % 200)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
        } else {
            for _ in 0..1 + next() % 3 {
                let at = (next() % bytes.len() as u64) as usize;
                let b = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 3 {
                    0 => bytes[at] = b,
                    1 => bytes.insert(at, b),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
        }
        for mode in [Mode::Strict, Mode::Lenient] {
            let dec = || ResponseDecoder::with_mode(mode).max_head_bytes(96);
            let whole = outcome(run(dec(), &bytes, bytes.len().max(1), true));
            let piece = 1 + (next() % 17) as usize;
            let split = outcome(run(dec(), &bytes, piece, true));
            assert_eq!(
                whole,
                split,
                "{mode:?} piece {piece}: {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }
    // The unmutated stream decodes strictly.
    assert!(strict(&valid).is_ok());
}
