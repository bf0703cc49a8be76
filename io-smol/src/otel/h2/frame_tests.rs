//! Frame codec: what the encoders write parses back; checks of §6.

use super::*;

fn one(bytes: &[u8]) -> Result<Frame, Error> {
    match parse(bytes, DEFAULT_MAX_FRAME)? {
        Some((f, n)) => {
            assert_eq!(n, bytes.len());
            Ok(f)
        }
        None => panic!("incomplete: {bytes:x?}"),
    }
}

fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    head(&mut b, payload.len(), kind, flags, stream);
    b.extend_from_slice(payload);
    b
}

#[test]
fn encoders_parse_back() {
    let mut b = Vec::new();
    settings(&mut b, &[(ENABLE_PUSH, 0), (MAX_FRAME_SIZE, 20_000)]);
    assert_eq!(
        one(&b).unwrap(),
        Frame::Settings {
            ack: false,
            params: vec![(ENABLE_PUSH, 0), (MAX_FRAME_SIZE, 20_000)]
        }
    );
    let mut b = Vec::new();
    settings_ack(&mut b);
    assert_eq!(b, [0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0]);
    let mut b = Vec::new();
    ping(&mut b, true, *b"abcdefgh");
    assert_eq!(
        one(&b).unwrap(),
        Frame::Ping {
            ack: true,
            data: *b"abcdefgh"
        }
    );
    let mut b = Vec::new();
    window_update(&mut b, 3, 70_000);
    assert_eq!(
        one(&b).unwrap(),
        Frame::WindowUpdate {
            stream: 3,
            increment: 70_000
        }
    );
    let mut b = Vec::new();
    rst_stream(&mut b, 5, Reason::CANCEL);
    assert_eq!(
        one(&b).unwrap(),
        Frame::RstStream {
            stream: 5,
            reason: Reason::CANCEL
        }
    );
    let mut b = Vec::new();
    goaway(&mut b, 7, Reason::PROTOCOL_ERROR);
    assert_eq!(
        one(&b).unwrap(),
        Frame::GoAway {
            last_stream: 7,
            reason: Reason::PROTOCOL_ERROR
        }
    );
    let mut b = Vec::new();
    data(&mut b, 1, b"xyz", true);
    assert_eq!(
        one(&b).unwrap(),
        Frame::Data {
            stream: 1,
            end_stream: true,
            data: b"xyz".to_vec(),
            flow_len: 3
        }
    );
}

#[test]
fn a_long_header_block_is_split_into_continuations() {
    let block: Vec<u8> = (0..=250).collect();
    let mut b = Vec::new();
    headers(&mut b, 1, &block, 100, true);
    let mut rest = &b[..];
    let mut frames = Vec::new();
    while let Some((f, n)) = parse(rest, DEFAULT_MAX_FRAME).unwrap() {
        frames.push(f);
        rest = &rest[n..];
    }
    assert_eq!(frames.len(), 3);
    let mut joined = Vec::new();
    for (i, f) in frames.into_iter().enumerate() {
        match f {
            Frame::Headers {
                stream: 1,
                end_stream: true,
                end_headers: false,
                block,
            } if i == 0 => joined.extend(block),
            Frame::Continuation {
                stream: 1,
                end_headers,
                block,
            } if i > 0 => {
                assert_eq!(end_headers, i == 2);
                joined.extend(block);
            }
            other => panic!("{i}: {other:?}"),
        }
    }
    assert_eq!(joined, block);
    // An empty block is one HEADERS frame with END_HEADERS.
    let mut b = Vec::new();
    headers(&mut b, 3, &[], 100, false);
    assert_eq!(b, [0, 0, 0, HEADERS, END_HEADERS, 0, 0, 0, 3]);
}

#[test]
fn incomplete_frames_wait_and_oversize_ones_fail_early() {
    let mut b = Vec::new();
    data(&mut b, 1, &[9; 40], false);
    for n in 0..b.len() {
        assert_eq!(parse(&b[..n], DEFAULT_MAX_FRAME), Ok(None));
    }
    // Only the 9-byte header of a too-long frame is needed to refuse it.
    assert_eq!(
        parse(&b[..HEADER_LEN], 39),
        Err(Error::Protocol(
            Reason::FRAME_SIZE_ERROR,
            "frame longer than our SETTINGS_MAX_FRAME_SIZE"
        ))
    );
}

#[test]
fn padding_priority_reserved_bit_and_unknown_types() {
    // DATA padded with 4: flow control counts all 8 bytes.
    let f = one(&raw(DATA, PADDED, 1, &[4, b'h', b'i', b'!', 0, 0, 0, 0])).unwrap();
    assert_eq!(
        f,
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"hi!".to_vec(),
            flow_len: 8
        }
    );
    // Padding that is all of the payload is allowed; more is not.
    assert!(one(&raw(DATA, PADDED, 1, &[2, 0, 0])).is_ok());
    assert!(one(&raw(DATA, PADDED, 1, &[3, 0, 0])).is_err());
    assert!(one(&raw(DATA, PADDED, 1, &[])).is_err());
    let f = one(&raw(
        HEADERS,
        PRIORITY_FLAG | END_HEADERS,
        1,
        &[0, 0, 0, 3, 9, 0x88],
    ))
    .unwrap();
    assert!(matches!(f, Frame::Headers { block, .. } if block == [0x88]));
    assert!(one(&raw(HEADERS, PRIORITY_FLAG, 1, &[0, 0])).is_err());
    // The reserved bit of the stream id is ignored.
    let mut b = raw(RST_STREAM, 0, 1, &[0, 0, 0, 8]);
    b[5] |= 0x80;
    assert!(matches!(
        one(&b).unwrap(),
        Frame::RstStream { stream: 1, .. }
    ));
    assert_eq!(
        one(&raw(0xfa, 0xff, 9, b"whatever")).unwrap(),
        Frame::Unknown
    );
    assert_eq!(one(&raw(PRIORITY, 0, 1, &[0; 5])).unwrap(), Frame::Priority);
}

#[test]
fn length_and_stream_rules() {
    let size = Reason::FRAME_SIZE_ERROR;
    let proto = Reason::PROTOCOL_ERROR;
    let cases: &[(Vec<u8>, Reason)] = &[
        (raw(DATA, 0, 0, b"x"), proto),
        (raw(HEADERS, 0, 0, b""), proto),
        (raw(PRIORITY, 0, 1, &[0; 4]), size),
        (raw(PRIORITY, 0, 0, &[0; 5]), proto),
        (raw(RST_STREAM, 0, 1, &[0; 3]), size),
        (raw(RST_STREAM, 0, 0, &[0; 4]), proto),
        (raw(SETTINGS, 0, 1, &[]), proto),
        (raw(SETTINGS, ACK, 0, &[0; 6]), size),
        (raw(SETTINGS, 0, 0, &[0; 7]), size),
        (raw(PING, 0, 0, &[0; 7]), size),
        (raw(PING, 0, 3, &[0; 8]), proto),
        (raw(GOAWAY, 0, 0, &[0; 7]), size),
        (raw(GOAWAY, 0, 1, &[0; 8]), proto),
        (raw(WINDOW_UPDATE, 0, 0, &[0; 5]), size),
        (raw(WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]), proto),
        (raw(CONTINUATION, 0, 0, b""), proto),
    ];
    for (bytes, want) in cases {
        match one(bytes) {
            Err(Error::Protocol(reason, _)) => assert_eq!(reason, *want, "{bytes:x?}"),
            other => panic!("{bytes:x?}: {other:?}"),
        }
    }
    // GOAWAY debug data is allowed and dropped.
    let f = one(&raw(GOAWAY, 0, 0, b"\x00\x00\x00\x05\x00\x00\x00\x00bye")).unwrap();
    assert_eq!(
        f,
        Frame::GoAway {
            last_stream: 5,
            reason: Reason::NO_ERROR
        }
    );
}
