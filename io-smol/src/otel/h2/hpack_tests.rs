//! RFC 7541 Appendix C vectors, table behaviour, and malformed blocks.

use super::*;

fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn text(fields: &[Field]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8(n.clone()).unwrap(),
                String::from_utf8(v.clone()).unwrap(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Decodes `hex` and checks the fields and the table afterwards.
fn step(d: &mut Decoder, hex: &str, want: &[(&str, &str)], table: &[(&str, &str)], size: usize) {
    let fields = d.decode(&unhex(hex)).unwrap();
    assert_eq!(text(&fields), pairs(want));
    let (entries, got) = d.table();
    assert_eq!(text(&entries), pairs(table));
    assert_eq!(got, size);
}

#[test]
fn c2_field_representations() {
    let mut d = Decoder::new(4096, 1 << 16);
    let kv = [("custom-key", "custom-header")];
    step(
        &mut d,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        &kv,
        &kv,
        55,
    );
    let mut d = Decoder::new(4096, 1 << 16);
    let path = [(":path", "/sample/path")];
    step(&mut d, "040c 2f73 616d 706c 652f 7061 7468", &path, &[], 0);
    let secret = [("password", "secret")];
    step(
        &mut d,
        "1008 7061 7373 776f 7264 0673 6563 7265 74",
        &secret,
        &[],
        0,
    );
    step(&mut d, "82", &[(":method", "GET")], &[], 0);
}

const REQ1: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQ2: [(&str, &str); 5] = [
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQ3: [(&str, &str); 5] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];

fn requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096, 1 << 16);
    let t1 = [(":authority", "www.example.com")];
    step(&mut d, blocks[0], &REQ1, &t1, 57);
    let t2 = [("cache-control", "no-cache"), t1[0]];
    step(&mut d, blocks[1], &REQ2, &t2, 110);
    let t3 = [("custom-key", "custom-value"), t2[0], t1[0]];
    step(&mut d, blocks[2], &REQ3, &t3, 164);
}

#[test]
fn c3_requests_without_huffman() {
    requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

const DATE1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOC: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

/// The 256-octet table of C.5/C.6: entries are evicted along the way.
fn responses(blocks: [&str; 3]) {
    let mut d = Decoder::new(256, 1 << 16);
    let r1 = [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", DATE1),
        ("location", LOC),
    ];
    let t1 = [r1[3], r1[2], r1[1], r1[0]];
    step(&mut d, blocks[0], &r1, &t1, 222);
    let r2 = [(":status", "307"), r1[1], r1[2], r1[3]];
    let t2 = [r2[0], t1[0], t1[1], t1[2]];
    step(&mut d, blocks[1], &r2, &t2, 222);
    let r3 = [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", DATE2),
        ("location", LOC),
        ("content-encoding", "gzip"),
        ("set-cookie", COOKIE),
    ];
    let t3 = [r3[5], r3[4], r3[2]];
    step(&mut d, blocks[2], &r3, &t3, 215);
}

#[test]
fn c5_responses_without_huffman() {
    responses([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
    ]);
}

#[test]
fn c6_responses_with_huffman() {
    responses([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

/// A literal with incremental indexing of `name: value`, plain strings.
fn indexed_literal(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x40];
    put_string(&mut b, name.as_bytes());
    put_string(&mut b, value.as_bytes());
    b
}

#[test]
fn size_updates_evict_and_are_bounded() {
    let mut d = Decoder::new(4096, 1 << 16);
    let mut block = indexed_literal("a", "1");
    block.extend(indexed_literal("b", "2"));
    d.decode(&block).unwrap();
    assert_eq!(d.table().1, 2 * 34);
    // Shrinking to one entry's size evicts the oldest.
    d.decode(&[0x20 | 31, 34 - 31]).unwrap();
    assert_eq!(text(&d.table().0), pairs(&[("b", "2")]));
    // Two updates at the start of a block are fine (§4.2); 0 empties.
    d.decode(&[0x20, 0x3f, 0xe1, 0x1f]).unwrap();
    assert_eq!(d.table(), (vec![], 0));
    // An entry larger than the whole table empties it and is not added.
    d.decode(&[0x20 | 31, 40 - 31]).unwrap();
    d.decode(&indexed_literal("a", "1")).unwrap();
    d.decode(&indexed_literal("big-name", "big-value")).unwrap();
    assert_eq!(d.table(), (vec![], 0));
    // Above our SETTINGS_HEADER_TABLE_SIZE; after a field.
    assert_eq!(
        d.decode(&[0x3f, 0xe2, 0x1f]),
        Err(Compression("table size update above our limit"))
    );
    assert_eq!(
        d.decode(&[0x82, 0x20]),
        Err(Compression("table size update after a field"))
    );
}

#[test]
fn dynamic_indices_follow_insertion_order() {
    let mut d = Decoder::new(4096, 1 << 16);
    let mut block = indexed_literal("x-first", "1");
    block.extend(indexed_literal("x-second", "2"));
    // 62 is the newest entry, 63 the one before it.
    block.extend([0x80 | 62, 0x80 | 63]);
    let got = text(&d.decode(&block).unwrap());
    assert_eq!(got[2], ("x-second".into(), "2".into()));
    assert_eq!(got[3], ("x-first".into(), "1".into()));
    // A name from the dynamic table: without indexing, 4-bit prefix.
    let fields = d.decode(&[0x0f, 62 - 15, 0x01, b'v']).unwrap();
    assert_eq!(text(&fields), pairs(&[("x-second", "v")]));
}

#[test]
fn malformed_blocks_are_errors_not_panics() {
    let bad: &[(&[u8], &str)] = &[
        (&[0x80], "index 0"),
        (&[0x80 | 62], "index beyond the dynamic table"),
        (&[0xff, 0x80], "truncated header block"),
        (
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            "integer too long",
        ),
        (&[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], "integer too large"),
        (&[0x00, 0x05, b'a'], "string longer than the block"),
        (&[0x04], "truncated header block"),
        (&[0x00, 0x81, 0x00, 0x00], "Huffman padding is not all ones"),
        (
            &[0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00],
            "EOS in a Huffman string",
        ),
    ];
    for (block, why) in bad {
        let mut d = Decoder::new(4096, 1 << 16);
        assert_eq!(d.decode(block), Err(Compression(why)), "{block:x?}");
    }
    // Every prefix of a valid block, and some noise, decode or fail cleanly.
    let valid = unhex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
    for n in 0..valid.len() {
        let _ = Decoder::new(4096, 1 << 16).decode(&valid[..n]);
    }
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let noise: Vec<u8> = (0..24)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = Decoder::new(4096, 1 << 16).decode(&noise);
    }
}

#[test]
fn the_header_list_size_is_bounded() {
    let mut d = Decoder::new(4096, 100);
    let mut block = Vec::new();
    encode_field(&mut block, b"x-a", &[b'v'; 30], false);
    assert!(d.decode(&block).is_ok());
    block.extend(block.clone());
    assert_eq!(d.decode(&block), Err(DecodeError::ListTooLarge));
}

#[test]
fn the_encoder_output_decodes_back() {
    let mut block = Vec::new();
    encode_field(&mut block, b":method", b"POST", false);
    encode_field(&mut block, b":scheme", b"https", false);
    encode_field(&mut block, b":path", b"/a.B/C", false);
    encode_field(&mut block, b"content-type", b"application/grpc", false);
    encode_field(&mut block, b"te", b"trailers", false);
    encode_field(&mut block, b"x-token", &[b'k'; 200], true);
    // Static matches are one byte each.
    assert_eq!(block[..2], [0x83, 0x87]);
    let mut d = Decoder::new(4096, 1 << 16);
    let got = text(&d.decode(&block).unwrap());
    let token = "k".repeat(200);
    assert_eq!(
        got,
        pairs(&[
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/a.B/C"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("x-token", &token),
        ])
    );
    assert_eq!(d.table(), (vec![], 0));
    // The secret went out never-indexed (0001 prefix, literal name).
    let at = block.windows(8).position(|w| w == b"\x07x-token").unwrap();
    assert_eq!(block[at - 1], 0x10);
}
