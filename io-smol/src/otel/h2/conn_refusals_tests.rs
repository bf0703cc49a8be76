//! The connection against peers that misbehave: GOAWAY and resets,
//! silence and closes, oversize input, protocol violations, noise.

use super::*;
use crate::otel::h2::frame::MAX_WINDOW;

#[test]
fn goaway_below_our_stream_means_unprocessed() {
    let mut s = Script::default();
    frame::goaway(&mut s.0, 0, Reason::NO_ERROR);
    let mut c = s.conn();
    let e = call(&mut c, b"x").unwrap_err();
    assert_eq!(
        e,
        Error::GoAway {
            reason: Reason::NO_ERROR,
            unprocessed: true
        }
    );
    assert!(e.unprocessed() && !c.is_open());
}

#[test]
fn goaway_at_our_stream_lets_it_finish_then_closes() {
    let mut s = Script::default();
    frame::goaway(&mut s.0, 1, Reason::NO_ERROR);
    let mut c = s.answer(1).conn();
    assert!(call(&mut c, b"x").is_ok());
    assert!(!c.is_open());
    // A GOAWAY with an error and then the close: reported as the GOAWAY.
    let mut s = Script::default();
    frame::goaway(&mut s.0, 1, Reason::ENHANCE_YOUR_CALM);
    let mut c = s.conn();
    c.io.eof = true;
    let e = call(&mut c, b"x").unwrap_err();
    assert_eq!(
        e,
        Error::GoAway {
            reason: Reason::ENHANCE_YOUR_CALM,
            unprocessed: false
        }
    );
}

#[test]
fn rst_stream_fails_the_request() {
    let mut s = Script::default().headers(1, HEAD, false);
    frame::rst_stream(&mut s.0, 1, Reason::REFUSED_STREAM);
    let mut c = s.conn();
    let e = call(&mut c, b"x").unwrap_err();
    assert_eq!(e, Error::Reset(Reason::REFUSED_STREAM));
    assert!(e.unprocessed() && !c.is_open());
}

#[test]
fn an_oversize_frame_is_refused_with_goaway() {
    // A DATA header announcing 16,385 bytes: refused before its payload.
    let mut c = Script::default()
        .raw(&[0, 0x40, 0x01, frame::DATA, 0, 0, 0, 0, 1])
        .conn();
    let e = call(&mut c, b"x").unwrap_err();
    assert!(
        matches!(e, Error::Protocol(Reason::FRAME_SIZE_ERROR, _)),
        "{e:?}"
    );
    assert_eq!(
        sent(&c).last(),
        Some(&Frame::GoAway {
            last_stream: 0,
            reason: Reason::FRAME_SIZE_ERROR
        })
    );
}

#[test]
fn response_bodies_and_header_blocks_are_bounded() {
    let mut s = Script::default().headers(1, HEAD, false);
    let chunk = vec![0; 16_384];
    for _ in 0..=MAX_BODY / chunk.len() {
        s = s.data(1, &chunk, false);
    }
    let mut c = s.conn();
    assert_eq!(
        call(&mut c, b"x").unwrap_err(),
        Error::TooLarge("response message")
    );

    let mut s = Script::default();
    frame::head(&mut s.0, 1, frame::HEADERS, 0, 1);
    s.0.push(0x88);
    for _ in 0..5 {
        frame::head(&mut s.0, chunk.len(), frame::CONTINUATION, 0, 1);
        s.0.extend_from_slice(&chunk);
    }
    let mut c = s.conn();
    assert_eq!(
        call(&mut c, b"x").unwrap_err(),
        Error::TooLarge("response header block")
    );
}

#[test]
fn silence_is_a_timeout_and_eof_is_closed() {
    let mut c = Script::default().settings(&[]).conn();
    assert_eq!(call(&mut c, b"x").unwrap_err(), Error::Timeout);
    let mut c = Script::default().headers(1, HEAD, false).conn();
    c.io.eof = true;
    assert_eq!(call(&mut c, b"x").unwrap_err(), Error::Closed);
}

#[test]
fn protocol_violations_are_connection_errors() {
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = Vec::new();
        f(&mut b);
        b
    };
    let cases: Vec<(Vec<u8>, Reason)> = vec![
        (
            with(&|b| {
                frame::head(b, 8, frame::PING, 0, 1);
                b.extend([0; 8]);
            }),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| {
                frame::head(b, 5, frame::SETTINGS, 0, 0);
                b.extend([0; 5]);
            }),
            Reason::FRAME_SIZE_ERROR,
        ),
        (
            with(&|b| {
                frame::head(b, 4, frame::WINDOW_UPDATE, 0, 0);
                b.extend([0; 4]);
            }),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::window_update(b, 0, MAX_WINDOW)),
            Reason::FLOW_CONTROL_ERROR,
        ),
        (
            with(&|b| frame::settings(b, &[(frame::ENABLE_PUSH, 1)])),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::settings(b, &[(frame::MAX_FRAME_SIZE, 100)])),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::settings(b, &[(frame::INITIAL_WINDOW_SIZE, 1 << 31)])),
            Reason::FLOW_CONTROL_ERROR,
        ),
        (
            with(&|b| {
                frame::head(b, 4, frame::PUSH_PROMISE, frame::END_HEADERS, 1);
                b.extend([0, 0, 0, 2]);
            }),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::head(b, 0, frame::CONTINUATION, 0, 1)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::data(b, 1, b"early", false)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::headers(b, 2, &[0x88], 16_384, true)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::rst_stream(b, 7, Reason::CANCEL)),
            Reason::PROTOCOL_ERROR,
        ),
        (
            with(&|b| frame::headers(b, 1, &[0x80], 16_384, true)),
            Reason::COMPRESSION_ERROR,
        ),
        (
            with(&|b| frame::headers(b, 1, &[0x84], 16_384, true)),
            Reason::PROTOCOL_ERROR,
        ),
    ];
    for (bytes, want) in cases {
        let mut c = Script::default().raw(&bytes).conn();
        match call(&mut c, b"x") {
            Err(Error::Protocol(reason, _)) => assert_eq!(reason, want, "{bytes:x?}"),
            other => panic!("{bytes:x?}: {other:?}"),
        }
        assert!(!c.is_open());
    }
}

#[test]
fn arbitrary_peer_bytes_never_panic() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..3000 {
        let len = 9 + round % 40;
        let mut bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        // Plausible headers: small lengths, known types, stream 1.
        bytes[0] = 0;
        bytes[1] = 0;
        bytes[2] = (len - 9) as u8;
        bytes[3] %= 10;
        bytes[5..9].copy_from_slice(&[0, 0, 0, (round % 4) as u8]);
        let mut c = Script::default().raw(&bytes).conn();
        let _ = call(&mut c, b"x");
    }
}
