//! Endpoints, request heads, metadata validation, and how responses and
//! failures become results and log texts.

use h2::Reason;

use super::net::{tls_config, webpki_roots};
use super::status::{grpc_message, reason_name};
use super::*;

fn header_map(list: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (n, v) in list {
        map.append(
            HeaderName::try_from(*n).unwrap(),
            HeaderValue::try_from(*v).unwrap(),
        );
    }
    map
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
        headers: header_map(headers),
        body,
        trailers: header_map(trailers),
    }
}

fn md(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ep(tls: bool, host: &str, port: u16, authority: &str) -> Endpoint {
    Endpoint {
        tls,
        host: host.into(),
        port,
        authority: authority.into(),
    }
}

#[test]
fn endpoints() {
    let ok = [
        (
            "http://127.0.0.1:4317",
            ep(false, "127.0.0.1", 4317, "127.0.0.1:4317"),
        ),
        (
            "HTTPS://otel.example",
            ep(true, "otel.example", 443, "otel.example"),
        ),
        ("http://collector/", ep(false, "collector", 80, "collector")),
        ("https://u:p@h:9/x?y", ep(true, "h", 9, "h:9")),
        ("http://[::1]:4317/v1", ep(false, "::1", 4317, "[::1]:4317")),
        (
            "https://[2001:db8::1]",
            ep(true, "2001:db8::1", 443, "[2001:db8::1]"),
        ),
    ];
    for (url, want) in ok {
        assert_eq!(Endpoint::parse(url).unwrap(), want, "{url}");
    }
    for bad in [
        "ftp://h",
        "http//h",
        "http://",
        "http://:80",
        "http://h:port",
        "http://h:70000",
        "http://[::1",
        "http://[zz]:1",
        "http://a b",
    ] {
        assert!(Endpoint::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_tls_config_offers_h2_only() {
    let cfg = tls_config(webpki_roots()).unwrap();
    assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()]);
    assert!(!webpki_roots().is_empty());
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
    let req = client.request(TRACES, Duration::from_millis(2500)).unwrap();
    assert_eq!(req.method(), Method::POST);
    assert_eq!(
        req.uri().to_string(),
        "https://otel.example:4317/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    );
    let got: Vec<(String, String, bool)> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            let value = v.to_str().unwrap().to_string();
            (n.to_string(), value, v.is_sensitive())
        })
        .collect();
    let agent = format!("ops {AGENT}");
    let want = [
        ("content-type", "application/grpc", false),
        ("te", "trailers", false),
        ("grpc-timeout", "2500m", false),
        ("user-agent", agent.as_str(), false),
        ("x-tenant", "t1", true),
        ("x-token", "s3cret", true),
    ];
    let want: Vec<(String, String, bool)> = want
        .iter()
        .map(|(n, v, s)| (n.to_string(), v.to_string(), *s))
        .collect();
    assert_eq!(got, want);
    let plain = Client::new("http://127.0.0.1:4317", &[]).unwrap();
    let req = plain.request(METRICS, Duration::from_secs(1)).unwrap();
    assert_eq!(
        req.uri().to_string(),
        format!("http://127.0.0.1:4317{METRICS}")
    );
    let agents: Vec<_> = req
        .headers()
        .get_all(USER_AGENT)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(agents, [AGENT]);
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
    let ok = Client::new("http://h:1", &md(&[("x-k", "tab\tok ~"), ("X-K", "last")])).unwrap();
    let values: Vec<_> = ok
        .metadata
        .get_all("x-k")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(values, ["last"]);
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
    let head = [("content-type", "application/grpc")];
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
    let only = [("grpc-status", "14"), ("grpc-message", "busy")];
    assert_eq!(
        outcome(response(200, &only, vec![], &[])),
        Err((14, "busy".into()))
    );
    let bad = [("grpc-status", "99")];
    assert_eq!(
        outcome(response(200, &bad, vec![], &[])),
        Err((2, "invalid grpc-status".into()))
    );
}

#[test]
fn outcomes_without_a_grpc_status_or_message() {
    assert_eq!(
        outcome(response(404, &[], vec![], &[])),
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
fn grpc_messages_keep_bad_escapes_and_blank_controls() {
    assert_eq!(grpc_message(b"100%"), "100%");
    assert_eq!(grpc_message(b"%zz%4"), "%zz%4");
    assert_eq!(grpc_message(b"a%0Ab%0d"), "a b ");
    assert_eq!(grpc_message(b"%FF"), "\u{fffd}");
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
            Error::Protocol(Reason::FRAME_SIZE_ERROR, "frame too long".into()),
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
            Error::Reset(Reason::from(0x42)),
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
    assert_eq!(reason_name(Reason::HTTP_1_1_REQUIRED), "HTTP_1_1_REQUIRED");
}

#[test]
fn socket_errors_name_tls_closes_and_timeouts() {
    use std::io::{Error as IoError, ErrorKind};
    let tls = IoError::new(
        ErrorKind::InvalidData,
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
    );
    assert_eq!(
        Error::io(&tls),
        Error::Transport("TLS: invalid peer certificate: UnknownIssuer".into())
    );
    assert_eq!(Error::io(&ErrorKind::BrokenPipe.into()), Error::Closed);
    assert_eq!(Error::io(&ErrorKind::TimedOut.into()), Error::Timeout);
    let other = Error::io(&IoError::other("boom"));
    assert_eq!(other, Error::Transport("transport: boom".into()));
}

#[test]
fn only_refusals_the_peer_vouches_for_are_retried() {
    let goaway = |reason, unprocessed| Error::GoAway {
        reason,
        unprocessed,
    };
    assert!(goaway(Reason::NO_ERROR, true).unprocessed());
    assert!(!goaway(Reason::ENHANCE_YOUR_CALM, false).unprocessed());
    assert!(Error::Reset(Reason::REFUSED_STREAM).unprocessed());
    assert!(!Error::Reset(Reason::CANCEL).unprocessed());
    assert!(!Error::Closed.unprocessed() && !Error::Timeout.unprocessed());
}
