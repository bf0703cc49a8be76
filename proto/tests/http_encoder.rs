//! Response encoding.

use proto::http::{
    encode_chunk, encode_rejection, encode_response, encode_stream_head, reason_phrase, Decoded,
    Limits, Rejection, RequestDecoder, CONTINUE_100, LAST_CHUNK,
};

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("utf-8")
}

#[test]
fn fixed_response_exact_bytes() {
    let out = encode_response(
        200,
        Some("application/json"),
        &[("X-Request-Id", "r1"), ("Cache-Control", "no-store")],
        b"{}",
        false,
    );
    assert_eq!(
        text(&out),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: r1\r\n\
         Cache-Control: no-store\r\nContent-Length: 2\r\n\r\n{}"
    );
}

#[test]
fn empty_body_still_has_content_length_and_close() {
    let out = encode_response(200, None, &[], b"", true);
    assert_eq!(
        text(&out),
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn bodyless_statuses_have_no_content_length() {
    let out = encode_response(204, None, &[], b"ignored", false);
    assert_eq!(text(&out), "HTTP/1.1 204 No Content\r\n\r\n");
    let out = encode_response(304, None, &[("ETag", "\"x\"")], b"", true);
    assert_eq!(
        text(&out),
        "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn header_injection_is_neutralised() {
    let out = encode_response(
        200,
        Some("text/plain\r\nX-Evil: 1"),
        &[("X-A\r\n", "v\r\n\r\nbody")],
        b"",
        false,
    );
    assert_eq!(
        text(&out),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plainX-Evil: 1\r\nX-A: vbody\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn stream_head_and_chunks() {
    let head = encode_stream_head(200, "application/x-ndjson", false);
    assert_eq!(
        text(&head),
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let head = encode_stream_head(200, "application/x-ndjson", true);
    assert!(text(&head).ends_with("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"));

    let mut out = Vec::new();
    encode_chunk(b"{\"a\":1}\n", &mut out);
    encode_chunk(b"", &mut out);
    encode_chunk(&[b'x'; 300], &mut out);
    let expected = [
        b"8\r\n{\"a\":1}\n\r\n12c\r\n".to_vec(),
        vec![b'x'; 300],
        b"\r\n".to_vec(),
    ]
    .concat();
    assert_eq!(out, expected);
    assert_eq!(LAST_CHUNK, b"0\r\n\r\n");
    assert_eq!(CONTINUE_100, b"HTTP/1.1 100 Continue\r\n\r\n");
}

#[test]
fn chunks_round_trip_through_the_decoder() {
    let payloads: Vec<Vec<u8>> = (0..40)
        .map(|i| vec![b'a' + (i % 26) as u8; i * 37 % 500])
        .collect();
    let mut raw = b"POST /rpc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for p in &payloads {
        encode_chunk(p, &mut raw);
    }
    raw.extend_from_slice(LAST_CHUNK);
    let mut d = RequestDecoder::new(Limits::default());
    d.feed(&raw);
    match d.poll() {
        Ok(Some(Decoded::Request(r))) => assert_eq!(r.body, payloads.concat()),
        other => panic!("{other:?}"),
    }
    assert!(d.is_idle());
}

#[test]
fn rejection_response_is_rfc7807_and_closes() {
    let r = Rejection {
        status: 431,
        reason: "too many header fields",
    };
    let out = encode_rejection(&r);
    let s = text(&out);
    let (head, body) = s.split_once("\r\n\r\n").expect("head/body split");
    assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
    assert!(head.contains("\r\nContent-Type: application/json"));
    assert!(head.contains("\r\nConnection: close"));
    assert!(head.contains(&format!("\r\nContent-Length: {}", body.len())));
    assert_eq!(
        body,
        r#"{"type":"request_header_fields_too_large","title":"Request Header Fields Too Large","status":431,"detail":"too many header fields"}"#
    );
    for (status, slug) in [
        (400, "bad_request"),
        (413, "payload_too_large"),
        (501, "not_implemented"),
        (505, "http_version_not_supported"),
        (418, "client_error"),
    ] {
        let out = encode_rejection(&Rejection {
            status,
            reason: "x",
        });
        let body = text(&out)
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).expect("json body");
        assert_eq!(v["type"], slug);
        assert_eq!(v["status"], status);
        assert_eq!(v["title"], reason_phrase(status));
        assert_eq!(v.as_object().map(|o| o.len()), Some(4));
    }
}

#[test]
fn reason_phrases() {
    assert_eq!(reason_phrase(200), "OK");
    assert_eq!(reason_phrase(400), "Bad Request");
    assert_eq!(reason_phrase(413), "Payload Too Large");
    assert_eq!(reason_phrase(422), "Unprocessable Entity");
    assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
    assert_eq!(reason_phrase(501), "Not Implemented");
    assert_eq!(reason_phrase(505), "HTTP Version Not Supported");
    assert_eq!(reason_phrase(299), "Success");
    assert_eq!(reason_phrase(999), "Unknown");
    let out = encode_response(599, None, &[], b"", false);
    assert!(text(&out).starts_with("HTTP/1.1 599 Server Error\r\n"));
}
