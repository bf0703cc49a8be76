//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B) and its decoder.
//!
//! The code is canonical: codes of one length are consecutive numbers, in
//! symbol order, and each length's first code follows from the previous
//! length's last. Decoding therefore needs, per length, only the first code
//! and the symbols of that length in order; no tree.

use std::sync::OnceLock;

/// `(code, bit length)` of each symbol 0..=255 and of EOS (256), from RFC
/// 7541 Appendix B (the code right-aligned).
#[rustfmt::skip]
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28),
    (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24),
    (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28),
    (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10),
    (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8),
    (0x16, 6), (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5),
    (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6),
    (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13),
    (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7),
    (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7),
    (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7),
    (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14),
    (0x22, 6), (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6),
    (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6),
    (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7), (0x2c, 6),
    (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11),
    (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22),
    (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22),
    (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24),
    (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
    (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22),
    (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22),
    (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22),
    (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23),
    (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20),
    (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22),
    (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27),
    (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
    (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27),
    (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20),
    (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21),
    (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25),
    (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27),
    (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28),
    (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27),
    (0x3ffffee, 26), (0x3fffffff, 30),
];

const EOS: u16 = 256;
const MAX_LEN: usize = 30;

/// Per length: the first code, how many codes, and where that length's
/// symbols start in `symbols`.
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

fn canonical() -> &'static Canonical {
    static TABLE: OnceLock<Canonical> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut c = Canonical {
            first: [0; MAX_LEN + 1],
            count: [0; MAX_LEN + 1],
            start: [0; MAX_LEN + 1],
            symbols: [0; 257],
        };
        let mut order: Vec<u16> = (0..=EOS).collect();
        order.sort_by_key(|&s| (CODES[s as usize].1, s));
        for (i, &s) in order.iter().enumerate() {
            let (code, len) = CODES[s as usize];
            let len = len as usize;
            if c.count[len] == 0 {
                c.first[len] = code;
                c.start[len] = i as u16;
            }
            c.count[len] += 1;
            c.symbols[i] = s;
        }
        c
    })
}

/// Appends the decoded bytes of `src` to `out`. Errors: the EOS symbol
/// inside the string, or padding longer than 7 bits or not all ones
/// (RFC 7541 §5.2).
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let c = canonical();
    let (mut code, mut len) = (0u32, 0usize);
    for byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let offset = code.wrapping_sub(c.first[len]);
            if code >= c.first[len] && offset < c.count[len] {
                let symbol = c.symbols[(c.start[len] as u32 + offset) as usize];
                if symbol == EOS {
                    return Err("EOS in a Huffman string");
                }
                out.push(symbol as u8);
                (code, len) = (0, 0);
            } else if len == MAX_LEN {
                // Unreachable for a complete code; kept so no input can
                // index past the tables.
                return Err("invalid Huffman code");
            }
        }
    }
    if len > 7 {
        return Err("Huffman padding longer than 7 bits");
    }
    if code != (1 << len) - 1 {
        return Err("Huffman padding is not all ones");
    }
    Ok(())
}

/// The Huffman encoding of `src`, padded with ones (the request encoder
/// sends plain literals; this is for the decoder's tests).
#[cfg(test)]
pub fn encode(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u64, 0u32);
    for &b in src {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_is_complete_and_canonical() {
        // Kraft sum exactly 1, i.e. a complete prefix code; and rebuilding
        // the codes canonically from the lengths gives the table back.
        let kraft: u64 = CODES.iter().map(|&(_, l)| 1u64 << (30 - l)).sum();
        assert_eq!(kraft, 1 << 30);
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut next = 0u32;
        let mut prev = CODES[order[0]].1;
        for (i, &s) in order.iter().enumerate() {
            let (code, len) = CODES[s];
            if i > 0 {
                next = (next + 1) << (len - prev);
            }
            prev = len;
            assert_eq!(code, next, "symbol {s}");
        }
        assert_eq!(CODES[256], (0x3fff_ffff, 30));
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        decode(&encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
        for b in 0..=255u8 {
            let mut one = Vec::new();
            decode(&encode(&[b, b'a']), &mut one).unwrap();
            assert_eq!(one, [b, b'a']);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        let mut out = Vec::new();
        // "a" is 00011; padding 000 is not all ones.
        assert!(decode(&[0b0001_1000], &mut out).is_err());
        // A whole byte of ones after a complete symbol: 8 bits of padding.
        assert!(decode(&[0b0001_1111, 0xff], &mut out).is_err());
        // EOS spelled out (30 ones) then padding.
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out).is_err());
        assert!(decode(&[], &mut out).is_ok());
    }
}
