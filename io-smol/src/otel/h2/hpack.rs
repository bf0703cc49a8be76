//! HPACK (RFC 7541). The decoder is complete: static and dynamic tables,
//! table size updates, integers, plain and Huffman string literals. The
//! encoder sends static-table references and literals that are never
//! added to the peer's dynamic table, so it keeps no state.

use std::collections::VecDeque;

use super::huffman;

/// A decoded header field: name and value as sent.
pub type Field = (Vec<u8>, Vec<u8>);

/// RFC 7541 Appendix A.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// Per-entry overhead counted in table and header list sizes (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Why a header block could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Malformed HPACK: a connection error COMPRESSION_ERROR.
    Compression(&'static str),
    /// The decoded list is larger than we accept.
    ListTooLarge,
}

use DecodeError::Compression;

/// The dynamic table (§2.3.2): newest entry first.
#[derive(Debug, Default)]
struct Table {
    entries: VecDeque<Field>,
    size: usize,
    max: usize,
}

impl Table {
    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + ENTRY_OVERHEAD,
                None => self.size = 0,
            }
        }
    }

    /// §4.4: make room, then add; an entry larger than the table empties
    /// it and is not added.
    fn insert(&mut self, field: Field) {
        let need = field.0.len() + field.1.len() + ENTRY_OVERHEAD;
        if need > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - need);
        self.size += need;
        self.entries.push_front(field);
    }

    fn resize(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }
}

/// One connection's decoder; it must see every header block in order.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask for.
    table_limit: usize,
    /// Our SETTINGS_MAX_HEADER_LIST_SIZE, enforced.
    list_limit: usize,
}

impl Decoder {
    pub fn new(table_limit: usize, list_limit: usize) -> Decoder {
        Decoder {
            table: Table {
                max: table_limit,
                ..Table::default()
            },
            table_limit,
            list_limit,
        }
    }

    /// Entries and size of the dynamic table (for tests).
    pub fn table(&self) -> (Vec<Field>, usize) {
        (
            self.table.entries.iter().cloned().collect(),
            self.table.size,
        )
    }

    /// Decodes one complete header block.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<Field>, DecodeError> {
        let mut r = Reader { buf: block, pos: 0 };
        let mut fields = Vec::new();
        let mut list_size = 0usize;
        while let Some(first) = r.peek() {
            let field = if first & 0x80 != 0 {
                // §6.1 indexed field.
                let index = r.int(7)?;
                self.get(index)?
            } else if first & 0x40 != 0 {
                // §6.2.1 literal with incremental indexing.
                let field = self.literal(&mut r, 6)?;
                self.table.insert(field.clone());
                field
            } else if first & 0x20 != 0 {
                // §6.3 dynamic table size update: only at the block's start
                // (§4.2), never above our setting.
                if !fields.is_empty() {
                    return Err(Compression("table size update after a field"));
                }
                let max = r.int(5)?;
                if max > self.table_limit {
                    return Err(Compression("table size update above our limit"));
                }
                self.table.resize(max);
                continue;
            } else {
                // §6.2.2 without indexing, §6.2.3 never indexed: same shape.
                self.literal(&mut r, 4)?
            };
            list_size += field.0.len() + field.1.len() + ENTRY_OVERHEAD;
            if list_size > self.list_limit {
                return Err(DecodeError::ListTooLarge);
            }
            fields.push(field);
        }
        Ok(fields)
    }

    fn get(&self, index: usize) -> Result<Field, DecodeError> {
        match index {
            0 => Err(Compression("index 0")),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            }
            _ => self
                .table
                .entries
                .get(index - 62)
                .cloned()
                .ok_or(Compression("index beyond the dynamic table")),
        }
    }

    fn literal(&self, r: &mut Reader<'_>, prefix: u8) -> Result<Field, DecodeError> {
        let index = r.int(prefix)?;
        let name = match index {
            0 => r.string()?,
            _ => self.get(index)?.0,
        };
        Ok((name, r.string()?))
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = self.peek().ok_or(Compression("truncated header block"))?;
        self.pos += 1;
        Ok(b)
    }

    /// §5.1 integer with an `n`-bit prefix; values past 2^32 are refused
    /// (nothing in a bounded block needs them).
    fn int(&mut self, n: u8) -> Result<usize, DecodeError> {
        let mask = (1u8 << n) - 1;
        let first = self.byte()? & mask;
        if first < mask {
            return Ok(first as usize);
        }
        let mut value = u64::from(mask);
        for shift in (0..=28).step_by(7) {
            let b = self.byte()?;
            value += u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return usize::try_from(value)
                    .ok()
                    .filter(|&v| v <= u32::MAX as usize)
                    .ok_or(Compression("integer too large"));
            }
        }
        Err(Compression("integer too long"))
    }

    /// §5.2 string literal, plain or Huffman-coded.
    fn string(&mut self) -> Result<Vec<u8>, DecodeError> {
        let huffman = self.peek().is_some_and(|b| b & 0x80 != 0);
        let len = self.int(7)?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Compression("string longer than the block"))?;
        let raw = &self.buf[self.pos..end];
        self.pos = end;
        if !huffman {
            return Ok(raw.to_vec());
        }
        let mut out = Vec::with_capacity(raw.len() * 8 / 5);
        huffman::decode(raw, &mut out).map_err(Compression)?;
        Ok(out)
    }
}

/// §5.1 integer: `flags` are the bits above the `n`-bit prefix.
fn put_int(out: &mut Vec<u8>, flags: u8, n: u8, mut value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends one field to a header block: a static-table reference when name
/// and value are both there, else a literal not added to the dynamic table
/// (`sensitive`: never indexed, §7.1.3, so intermediaries do not index
/// secrets either), with the name by static index where it has one.
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8], sensitive: bool) {
    let by_name = STATIC.iter().position(|(n, _)| n.as_bytes() == name);
    if !sensitive {
        if let Some(i) = STATIC
            .iter()
            .position(|(n, v)| n.as_bytes() == name && v.as_bytes() == value)
        {
            put_int(out, 0x80, 7, i + 1);
            return;
        }
    }
    let flags = if sensitive { 0x10 } else { 0x00 };
    match by_name {
        Some(i) => put_int(out, flags, 4, i + 1),
        None => {
            put_int(out, flags, 4, 0);
            put_string(out, name);
        }
    }
    put_string(out, value);
}

#[cfg(test)]
#[path = "hpack_tests.rs"]
mod tests;
