//! Request headers, metadata validation, and how responses and failures
//! become results and log texts.

use super::*;
use crate::otel::h2::hpack::Decoder;

fn fields(list: &[(&str, &str)]) -> Vec<Field> {
    list.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn ok_body(message: &[u8]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&(message.len() as u32).to_be_bytes());
    b.extend_from_slice(message);
    b
}

fn response(
    status: u16,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    trailers: &[(&str, &str)],
) -> Response {
    Response {
        status,
        headers: fields(headers),
        body,
        trailers: fields(trailers),
    }
}

fn md(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_request_carries_the_grpc_headers_and_metadata() {
    let meta = md(&[
        ("X-Tenant", "t1"),
        ("x-token", "s3cret"),
        ("te", "gzip"),
        ("user-agent", "ops"),
    ]);
    let client = Client::new("https://otel.example:4317/ignored", &meta).unwrap();
    let block = client.request_block(TRACES, Duration::from_millis(2500));
    let got = Decoder::new(4096, 1 << 16).decode(&block).unwrap();
    let got: Vec<(String, String)> = got
        .into_iter()
        .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    let want = md(&[
        (":method", "POST"),
        (":scheme", "https"),
        (
            ":path",
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        ),
        (":authority", "otel.example:4317"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "2500m"),
        ("user-agent", &format!("ops {USER_AGENT}")),
        ("x-tenant", "t1"),
        ("x-token", "s3cret"),
    ]);
    assert_eq!(got, want);
    let plain = Client::new("http://127.0.0.1:4317", &[]).unwrap();
    let block = plain.request_block(METRICS, Duration::from_secs(1));
    let got = Decoder::new(4096, 1 << 16).decode(&block).unwrap();
    assert_eq!(got[1].1, b"http");
    assert_eq!(got[2].1, METRICS.as_bytes());
    assert_eq!(got[3].1, b"127.0.0.1:4317");
}

#[test]
fn metadata_is_checked_at_startup_without_echoing_values() {
    for name in ["bad name", "x-data-bin", "Connection", "é", ""] {
        let e = Client::new("http://h:1", &md(&[(name, "v")]))
            .err()
            .unwrap();
        assert_eq!(
            e,
            format!("otlp_headers \"{name}\" is not a valid gRPC metadata name")
        );
    }
    for value in ["line\nbreak", "caf\u{e9}", "\u{7f}"] {
        let e = Client::new("http://h:1", &md(&[("x-k", value)]))
            .err()
            .unwrap();
        assert_eq!(e, "otlp_headers \"x-k\" has a value gRPC cannot carry");
    }
    assert!(Client::new("http://h:1", &md(&[("x-k", "tab\tok ~")])).is_ok());
    let e = Client::new("ftp://h", &[]).err().unwrap();
    assert!(e.starts_with("otlp_endpoint: "), "{e}");
}

#[test]
fn timeouts_fit_eight_digits() {
    assert_eq!(grpc_timeout(Duration::from_millis(10_000)), "10000m");
    assert_eq!(grpc_timeout(Duration::from_micros(10)), "1m");
    assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
}

#[test]
fn outcomes_from_trailers_and_trailers_only_responses() {
    let head = [(":status", "200"), ("content-type", "application/grpc")];
    let r = response(200, &head, ok_body(b"\x0a\x00"), &[("grpc-status", "0")]);
    assert_eq!(outcome(r), Ok(b"\x0a\x00".to_vec()));
    let r = response(
        200,
        &head,
        ok_body(b""),
        &[
            ("grpc-status", "3"),
            ("grpc-message", "bad%20span%3a%E2%9C%93"),
        ],
    );
    assert_eq!(outcome(r), Err((3, "bad span:\u{2713}".into())));
    let only = [
        (":status", "200"),
        ("grpc-status", "14"),
        ("grpc-message", "busy"),
    ];
    assert_eq!(
        outcome(response(200, &only, vec![], &[])),
        Err((14, "busy".into()))
    );
    let bad = [(":status", "200"), ("grpc-status", "99")];
    assert_eq!(
        outcome(response(200, &bad, vec![], &[])),
        Err((2, "invalid grpc-status".into()))
    );
}

#[test]
fn outcomes_without_a_grpc_status_or_message() {
    let h = [(":status", "404")];
    assert_eq!(
        outcome(response(404, &h, vec![], &[])),
        Err((12, "HTTP status 404".into()))
    );
    for (status, code) in [
        (400, 13),
        (401, 16),
        (403, 7),
        (429, 14),
        (503, 14),
        (500, 2),
    ] {
        assert_eq!(
            outcome(response(status, &[], vec![], &[])).unwrap_err().0,
            code
        );
    }
    let ok = [("grpc-status", "0")];
    let none = response(200, &[], vec![], &[]);
    assert_eq!(
        outcome(none),
        Err((2, "response without grpc-status".into()))
    );
    assert_eq!(
        outcome(response(200, &[], vec![], &ok)),
        Err((13, "missing response message".into()))
    );
    let mut compressed = ok_body(b"x");
    compressed[0] = 1;
    assert_eq!(
        outcome(response(200, &[], compressed, &ok)),
        Err((13, "compressed response message".into()))
    );
    let mut two = ok_body(b"x");
    two.extend(ok_body(b"y"));
    assert_eq!(
        outcome(response(200, &[], two, &ok)),
        Err((13, "malformed response message".into()))
    );
    let huge = vec![0, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(outcome(response(200, &[], huge, &ok)).unwrap_err().0, 8);
}

#[test]
fn percent_decoding_keeps_bad_escapes_and_blanks_controls() {
    assert_eq!(percent_decode(b"100%"), "100%");
    assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
    assert_eq!(percent_decode(b"a%0Ab%0d"), "a b ");
    assert_eq!(percent_decode(b"%FF"), "\u{fffd}");
}

#[test]
fn failure_texts() {
    let t = Duration::from_millis(1500);
    let cases = [
        (Error::Timeout, "no answer within 1500 ms"),
        (
            Error::Transport("connect: Connection refused (os error 111)".into()),
            "gRPC Unavailable: connect: Connection refused (os error 111)",
        ),
        (
            Error::Closed,
            "gRPC Unavailable: connection closed by the collector",
        ),
        (
            Error::Protocol(Reason::FRAME_SIZE_ERROR, "frame too long"),
            "gRPC Internal: HTTP/2 FRAME_SIZE_ERROR: frame too long",
        ),
        (
            Error::GoAway {
                reason: Reason::NO_ERROR,
                unprocessed: true,
            },
            "gRPC Unavailable: the collector closed the connection (GOAWAY NO_ERROR)",
        ),
        (
            Error::Reset(Reason::REFUSED_STREAM),
            "gRPC Unavailable: stream reset by the collector (REFUSED_STREAM)",
        ),
        (
            Error::Reset(Reason(0x42)),
            "gRPC Internal: stream reset by the collector (error code 0x42)",
        ),
        (
            Error::TooLarge("response message"),
            "gRPC ResourceExhausted: response message over our limit",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(describe(&e, t), want);
    }
}
