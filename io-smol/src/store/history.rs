//! `provider.request` payloads with their history stored once (see
//! docs/storage.md, "History stored once"). Pure text transformations; the
//! SQL around them is in `history_db.rs`.
//!
//! Every `provider.request` payload carries the whole provider-facing
//! history (`messages`) and the advertised `tools`, so storing it verbatim
//! makes a session's storage quadratic in its length. Instead, each of
//! those two arrays is kept as a list of *chunks* in the side table
//! `bae_history_chunks (session_id, ord, body)`: a chunk is a JSON array
//! holding a run of consecutive elements, written once and never changed.
//! The stored payload is the original text with each such member's value
//! replaced by `null`, behind a header naming the chunk ranges:
//!
//! ```text
//! {"bae_chunks":{"messages":[[0,7]],"tools":[[3,4]]},"attempt":0,…,"messages":null,"tools":null,…}
//! ```
//!
//! Reading splices the chunks' elements back in, which gives the original
//! bytes exactly. A new request reuses the chunks of the session's previous
//! one for its longest common prefix of elements (whole chunks only) and
//! appends one chunk with the rest, so a turn stores only what it added.

use std::collections::HashMap;
use std::ops::Range;

use serde_json::Value;

use super::json_scan::Scanner;

/// The event type whose payloads are stored this way.
pub(super) const EVENT_TYPE: &str = "provider.request";

/// Every stored form with chunks starts with these bytes; a payload that
/// starts with them is always read through [`expand`].
pub(super) const HEADER: &str = "{\"bae_chunks\":";

/// The shared members, as their names and as their raw key texts.
const NAMES: [&str; 2] = ["messages", "tools"];
const KEYS: [&str; 2] = ["\"messages\"", "\"tools\""];

/// A member's chunk list is re-written as one chunk (a snapshot) when its
/// ranges would exceed this, so that a stored row stays small and a read
/// needs few range queries even when earlier elements keep changing.
pub(super) const MAX_RANGES: usize = 16;

/// What is known about one shared member of a session's latest stored
/// request: its elements and the chunks that hold them. Chunks never
/// change, so this stays true however old it is; it only has to describe
/// committed chunks (see [`HistoryCache`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Known {
    /// The elements joined by `,` (the array's text without brackets).
    joined: String,
    /// End offset in `joined` of each element.
    ends: Vec<usize>,
    /// `(ord, element count)` of each chunk, in order.
    chunks: Vec<(i64, usize)>,
}

impl Known {
    /// Rebuilds the state from the bodies of the chunks `ords`, in order.
    pub fn from_chunks<'b>(chunks: impl IntoIterator<Item = (i64, &'b str)>) -> Option<Known> {
        let mut k = Known::default();
        for (ord, body) in chunks {
            let inner = chunk_inner(body)?;
            if !k.joined.is_empty() {
                k.joined.push(',');
            }
            let base = k.joined.len();
            k.joined.push_str(inner);
            let spans = canonical_elements(inner)?;
            k.ends.extend(spans.iter().map(|r| base + r.end));
            k.chunks.push((ord, spans.len()));
        }
        Some(k)
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1] + 1
        }
    }

    fn element(&self, i: usize) -> &str {
        &self.joined[self.start(i)..self.ends[i]]
    }

    /// Approximate heap bytes (for the cache budget).
    fn weight(&self) -> usize {
        self.joined.capacity() + self.ends.capacity() * 8 + self.chunks.capacity() * 16
    }
}

/// Per session, what is known of each shared member (`None`: nothing that
/// can be reused).
pub(super) type SessionKnown = [Option<Known>; 2];

/// A chunk row to insert.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NewChunk {
    pub ord: i64,
    pub body: String,
}

/// The stored form of one payload.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Compacted {
    pub payload: String,
    pub chunks: Vec<NewChunk>,
}

/// The elements of `inner` (an array's text without brackets) if they are
/// separated by bare commas, with no whitespace around them.
fn canonical_elements(inner: &str) -> Option<Vec<Range<usize>>> {
    let mut s = Scanner::new(inner, 0);
    let mut out = Vec::new();
    while !s.at_end() {
        if !out.is_empty() && !s.eat(b',') {
            return None;
        }
        let start = s.i;
        s.value()?;
        out.push(start..s.i);
    }
    Some(out)
}

/// A chunk body's elements without the brackets (a chunk is never empty).
fn chunk_inner(body: &str) -> Option<&str> {
    body.strip_prefix('[')?
        .strip_suffix(']')
        .filter(|inner| !inner.is_empty())
}

/// One scanned shared member of a payload being stored.
struct Shared {
    member: usize,
    /// The value's span: `[` … `]`.
    value: Range<usize>,
    /// Leading elements known to equal the known state's (fast path).
    prefix: usize,
    /// Spans of the elements after those.
    rest: Vec<Range<usize>>,
}

/// Scans a shared member's array value at `s.i` (a `[`). `Ok(None)`: valid
/// but not in canonical form (whitespace), so it stays inline.
fn scan_array(s: &mut Scanner, text: &str, known: Option<&Known>) -> Option<Option<Shared>> {
    let open = s.i;
    s.i += 1;
    let mut prefix = 0;
    let mut canonical = true;
    // Fast path: the array starts with the known elements (then its first
    // elements are those, since each is a complete value followed by a
    // separator).
    if let Some(k) = known.filter(|k| !k.ends.is_empty()) {
        let after = open + 1 + k.joined.len();
        if text[open + 1..].starts_with(&k.joined)
            && matches!(text.as_bytes().get(after), Some(b',' | b']'))
        {
            prefix = k.ends.len();
            s.i = after;
        }
    }
    let mut rest = Vec::new();
    let empty_tail = if prefix > 0 {
        // At the `,` or `]` after the known elements.
        let closed = s.eat(b']');
        if !closed {
            s.eat(b',');
        }
        closed
    } else {
        canonical &= !s.ws();
        s.eat(b']')
    };
    if !empty_tail {
        loop {
            canonical &= !s.ws();
            let start = s.i;
            s.value()?;
            rest.push(start..s.i);
            canonical &= !s.ws();
            if s.eat(b',') {
                continue;
            }
            if s.eat(b']') {
                break;
            }
            return None;
        }
    }
    let shared = Shared {
        member: 0,
        value: open..s.i,
        prefix,
        rest,
    };
    Some(canonical.then_some(shared))
}

/// The stored form of `payload` given what is known of the session, with
/// new chunks numbered from `next_ord`; `known` is updated to describe the
/// new row. `None`: the payload is stored as it is (see [`escape`]).
pub(super) fn compact(payload: &str, known: &mut SessionKnown, next_ord: i64) -> Option<Compacted> {
    let Some(shared) = scan_payload(payload, known) else {
        // Nothing of this row can be reused by the next one (the state a
        // restart would rebuild from it).
        *known = [None, None];
        return None;
    };
    let mut header = String::from(HEADER);
    header.push('{');
    let mut chunks = Vec::new();
    let mut updates = Vec::new();
    for sh in &shared {
        let ord = next_ord + chunks.len() as i64;
        let (ranges, chunk, state) = plan_member(payload, sh, known[sh.member].take(), ord);
        if header.len() > HEADER.len() + 1 {
            header.push(',');
        }
        header.push_str(KEYS[sh.member]);
        header.push_str(":[");
        for (i, r) in ranges.iter().enumerate() {
            if i > 0 {
                header.push(',');
            }
            header.push_str(&format!("[{},{}]", r.start, r.end));
        }
        header.push(']');
        chunks.extend(chunk);
        updates.push((sh.member, state));
    }
    header.push_str("},");
    let mut out = String::with_capacity(header.len() + payload.len().min(4096));
    out.push_str(&header);
    let mut pos = 1;
    for sh in &shared {
        out.push_str(&payload[pos..sh.value.start]);
        out.push_str("null");
        pos = sh.value.end;
    }
    out.push_str(&payload[pos..]);
    for (member, state) in updates {
        known[member] = Some(state);
    }
    // Members not stored as chunks this time have nothing reusable.
    for (m, k) in known.iter_mut().enumerate() {
        if !shared.iter().any(|sh| sh.member == m) {
            *k = None;
        }
    }
    Some(Compacted {
        payload: out,
        chunks,
    })
}

/// The shared members worth storing as chunks (canonical, non-empty
/// arrays), in text order; `None` when there are none or the payload is
/// not one JSON object that starts with `{`.
fn scan_payload(payload: &str, known: &SessionKnown) -> Option<Vec<Shared>> {
    if !payload.starts_with('{') {
        return None;
    }
    let mut s = Scanner::new(payload, 1);
    let mut seen = [false; 2];
    let mut shared = Vec::new();
    s.ws();
    if s.eat(b'}') {
        return None;
    }
    loop {
        let key_start = s.i;
        s.string()?;
        let key = &payload[key_start..s.i];
        s.ws();
        if !s.eat(b':') {
            return None;
        }
        s.ws();
        match KEYS.iter().position(|k| *k == key) {
            Some(m) => {
                // A repeated shared key would make the stored form
                // ambiguous: keep such a payload as it is.
                if std::mem::replace(&mut seen[m], true) {
                    return None;
                }
                if s.peek() == Some(b'[') {
                    if let Some(mut sh) = scan_array(&mut s, payload, known[m].as_ref())? {
                        sh.member = m;
                        if sh.prefix + sh.rest.len() > 0 {
                            shared.push(sh);
                        }
                    }
                } else {
                    s.value()?;
                }
            }
            None => s.value()?,
        }
        s.ws();
        if s.eat(b',') {
            s.ws();
            continue;
        }
        if s.eat(b'}') {
            break;
        }
        return None;
    }
    s.ws();
    (s.at_end() && !shared.is_empty()).then_some(shared)
}

/// Chunk ranges, the new chunk (if any) and the new known state of one
/// shared member.
fn plan_member(
    payload: &str,
    sh: &Shared,
    known: Option<Known>,
    ord: i64,
) -> (Vec<Range<i64>>, Option<NewChunk>, Known) {
    let inner = sh.value.start + 1..sh.value.end - 1;
    let n = sh.prefix + sh.rest.len();
    // Span of element i in the payload.
    let span = |i: usize| -> Range<usize> {
        match &known {
            Some(k) if i < sh.prefix => inner.start + k.start(i)..inner.start + k.ends[i],
            _ => sh.rest[i - sh.prefix].clone(),
        }
    };
    // Longest common prefix with the known elements.
    let mut common = sh.prefix;
    if let Some(k) = &known {
        while common < n && common < k.ends.len() && payload[span(common)] == *k.element(common) {
            common += 1;
        }
    }
    // Whole known chunks inside the common prefix are reused.
    let mut kept: Vec<(i64, usize)> = Vec::new();
    let mut covered = 0;
    for &(c, count) in known.as_ref().map_or(&[][..], |k| &k.chunks) {
        if covered + count > common {
            break;
        }
        kept.push((c, count));
        covered += count;
    }
    let mut ranges = ord_ranges(&kept);
    if covered < n {
        push_ord(&mut ranges, ord);
    }
    if ranges.len() > MAX_RANGES {
        kept.clear();
        covered = 0;
        ranges = std::iter::once(ord..ord + 1).collect();
    }
    let chunk = (covered < n).then(|| NewChunk {
        ord,
        body: format!("[{}]", &payload[span(covered).start..span(n - 1).end]),
    });
    if let Some(c) = &chunk {
        kept.push((c.ord, n - covered));
    }
    // The new state: the array's elements, extended in place when the
    // known ones are its prefix.
    let ends: Vec<usize> = match &known {
        Some(k) if sh.prefix == k.ends.len() && sh.prefix > 0 => Vec::new(),
        _ => (0..n).map(|i| span(i).end - inner.start).collect(),
    };
    let state = match known {
        Some(mut k) if sh.prefix == k.ends.len() && sh.prefix > 0 => {
            if let (Some(first), Some(last)) = (sh.rest.first(), sh.rest.last()) {
                let old = k.joined.len();
                k.joined.push(',');
                k.joined.push_str(&payload[first.start..last.end]);
                k.ends
                    .extend(sh.rest.iter().map(|r| old + 1 + (r.end - first.start)));
            }
            k.chunks = kept;
            k
        }
        _ => Known {
            joined: payload[inner].to_string(),
            ends,
            chunks: kept,
        },
    };
    (ranges, chunk, state)
}

fn ord_ranges(chunks: &[(i64, usize)]) -> Vec<Range<i64>> {
    let mut out = Vec::new();
    for &(ord, _) in chunks {
        push_ord(&mut out, ord);
    }
    out
}

fn push_ord(ranges: &mut Vec<Range<i64>>, ord: i64) {
    match ranges.last_mut() {
        Some(r) if r.end == ord => r.end += 1,
        _ => ranges.push(ord..ord + 1),
    }
}

/// The stored form of a payload [`compact`] left as it is: unchanged,
/// unless it starts with [`HEADER`] itself, when an empty header keeps it
/// from being read as a stored form.
pub(super) fn escape(payload: &str) -> Option<String> {
    payload
        .starts_with(HEADER)
        .then(|| format!("{HEADER}{{}},{}", &payload[1..]))
}

/// The parsed header of a stored form.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Header {
    /// `(member, chunk ranges)` in header order.
    pub refs: Vec<(usize, Vec<Range<i64>>)>,
    /// Offset of the first byte after the header's `,`.
    rest: usize,
}

/// The header of a stored `provider.request` payload; `Ok(None)` when the
/// payload is stored as it is.
pub(super) fn header(stored: &str) -> Result<Option<Header>, String> {
    if !stored.starts_with(HEADER) {
        return Ok(None);
    }
    let bad = || "malformed bae_chunks header".to_string();
    let mut s = Scanner::new(stored, HEADER.len());
    let start = s.i;
    s.value().ok_or_else(bad)?;
    let map: serde_json::Map<String, Value> =
        serde_json::from_str(&stored[start..s.i]).map_err(|_| bad())?;
    if !s.eat(b',') {
        return Err(bad());
    }
    let mut refs = Vec::new();
    for (name, v) in map {
        let member = NAMES.iter().position(|n| *n == name).ok_or_else(bad)?;
        let mut ranges = Vec::new();
        for r in v.as_array().ok_or_else(bad)? {
            let pair = r.as_array().filter(|p| p.len() == 2).ok_or_else(bad)?;
            let (from, to) = (pair[0].as_i64(), pair[1].as_i64());
            match (from, to) {
                (Some(f), Some(t)) if 0 <= f && f < t => ranges.push(f..t),
                _ => return Err(bad()),
            }
        }
        if ranges.is_empty() {
            return Err(bad());
        }
        refs.push((member, ranges));
    }
    Ok(Some(Header { refs, rest: s.i }))
}

/// The original payload of a stored form, given its header and the bodies
/// of its chunks.
pub(super) fn expand<'c>(
    stored: &str,
    h: &Header,
    chunk: impl Fn(i64) -> Option<&'c str>,
) -> Result<String, String> {
    let rest = &stored[h.rest..];
    if h.refs.is_empty() {
        return Ok(format!("{{{rest}"));
    }
    // The placeholder of each member, in text order.
    let mut places: Vec<(Range<usize>, usize)> = Vec::new();
    let bad = || "stored payload does not match its bae_chunks header".to_string();
    let mut s = Scanner::new(stored, h.rest);
    loop {
        s.ws();
        let key_start = s.i;
        s.string().ok_or_else(bad)?;
        let key = &stored[key_start..s.i];
        s.ws();
        if !s.eat(b':') {
            return Err(bad());
        }
        s.ws();
        let start = s.i;
        s.value().ok_or_else(bad)?;
        if let Some(i) = h.refs.iter().position(|(m, _)| KEYS[*m] == key) {
            if &stored[start..s.i] != "null" || places.iter().any(|p| p.1 == i) {
                return Err(bad());
            }
            places.push((start..s.i, i));
        }
        s.ws();
        if s.eat(b',') {
            continue;
        }
        if s.eat(b'}') {
            break;
        }
        return Err(bad());
    }
    if places.len() != h.refs.len() {
        return Err(bad());
    }
    let mut parts: Vec<Vec<&str>> = Vec::with_capacity(places.len());
    let mut size = stored.len();
    for (_, i) in &places {
        let mut inners = Vec::new();
        for ord in h.refs[*i].1.iter().cloned().flatten() {
            let body = chunk(ord).ok_or_else(|| format!("history chunk {ord} is missing"))?;
            let inner =
                chunk_inner(body).ok_or_else(|| format!("history chunk {ord} is malformed"))?;
            size += inner.len() + 1;
            inners.push(inner);
        }
        parts.push(inners);
    }
    let mut out = String::with_capacity(size);
    out.push('{');
    let mut pos = h.rest;
    for ((place, _), inners) in places.iter().zip(&parts) {
        out.push_str(&stored[pos..place.start]);
        out.push('[');
        for (j, inner) in inners.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str(inner);
        }
        out.push(']');
        pos = place.end;
    }
    out.push_str(&stored[pos..]);
    Ok(out)
}

/// What the store remembers of each session's latest stored request, so
/// that storing the next one needs no read. Bounded by a byte budget
/// (least recently used sessions are forgotten); a forgotten or never
/// known session is looked up in the database instead. An entry must only
/// ever describe committed chunks or chunks of the open transaction: the
/// store forgets every session a failed batch touched.
#[derive(Debug)]
pub(super) struct HistoryCache {
    map: HashMap<String, (SessionKnown, u64, usize)>,
    tick: u64,
    bytes: usize,
    budget: usize,
}

/// Default budget of [`HistoryCache`].
pub(super) const CACHE_BYTES: usize = 32 << 20;

impl HistoryCache {
    pub fn new(budget: usize) -> Self {
        HistoryCache {
            map: HashMap::new(),
            tick: 0,
            bytes: 0,
            budget,
        }
    }

    /// Takes the entry of `session` out (to be put back with [`put`]).
    ///
    /// [`put`]: HistoryCache::put
    pub fn take(&mut self, session: &str) -> Option<SessionKnown> {
        let (known, _, weight) = self.map.remove(session)?;
        self.bytes -= weight;
        Some(known)
    }

    pub fn put(&mut self, session: &str, known: SessionKnown) {
        self.tick += 1;
        let weight = known.iter().flatten().map(Known::weight).sum::<usize>() + session.len();
        if let Some((_, _, old)) = self
            .map
            .insert(session.to_string(), (known, self.tick, weight))
        {
            self.bytes -= old;
        }
        self.bytes += weight;
        if self.bytes > self.budget {
            self.shrink();
        }
    }

    pub fn forget(&mut self, session: &str) {
        self.take(session);
    }

    /// Forgets the least recently used sessions down to 3/4 of the budget.
    fn shrink(&mut self) {
        let mut by_age: Vec<(u64, String)> =
            self.map.iter().map(|(k, v)| (v.1, k.clone())).collect();
        by_age.sort_unstable();
        for (_, session) in by_age {
            if self.bytes <= self.budget / 4 * 3 {
                break;
            }
            self.forget(&session);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
