//! Text appended unit by unit, held in chunks of about [`CHUNK`] bytes: a
//! string grown by appending holds up to twice its length, which the
//! history cache would count against its budget; sealed chunks hold what
//! they use.

/// Bytes a chunk is given when it starts (a larger unit gets its own).
pub(super) const CHUNK: usize = 64 * 1024;

/// A position in [`Chunks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Pos {
    pub chunk: u32,
    pub at: u32,
}

/// Units of text joined by `,` within each chunk.
#[derive(Debug, Clone, Default)]
pub(super) struct Chunks {
    chunks: Vec<String>,
}

impl Chunks {
    /// Appends `text` and returns where it starts.
    pub fn push(&mut self, text: &str) -> Pos {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.is_empty() || c.len() + 1 + text.len() <= c.capacity().max(CHUNK));
        if !fits {
            if let Some(c) = self.chunks.last_mut() {
                c.shrink_to_fit();
            }
            self.chunks
                .push(String::with_capacity(CHUNK.max(text.len())));
        }
        let chunk = self.chunks.len().saturating_sub(1);
        let Some(c) = self.chunks.last_mut() else {
            return Pos::default();
        };
        if !c.is_empty() {
            c.push(',');
        }
        let at = c.len();
        c.push_str(text);
        Pos {
            chunk: chunk as u32,
            at: at as u32,
        }
    }

    /// `len` bytes at `p`.
    pub fn get(&self, p: Pos, len: usize) -> Option<&str> {
        let at = p.at as usize;
        self.chunks.get(p.chunk as usize)?.get(at..at + len)
    }

    /// The text from `a` to `b` (exclusive), one slice per chunk it spans
    /// (each made of whole units).
    pub fn range(&self, a: Pos, b: Pos) -> Vec<&str> {
        let mut out = Vec::with_capacity((b.chunk - a.chunk.min(b.chunk)) as usize + 1);
        for c in a.chunk..=b.chunk {
            let Some(text) = self.chunks.get(c as usize) else {
                break;
            };
            let from = if c == a.chunk { a.at as usize } else { 0 };
            let to = if c == b.chunk {
                b.at as usize
            } else {
                text.len()
            };
            if let Some(s) = text.get(from..to).filter(|s| !s.is_empty()) {
                out.push(s);
            }
        }
        out
    }

    pub fn weight(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<String>()
            + self.chunks.iter().map(String::capacity).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_never_split_and_ranges_join_back() {
        let mut c = Chunks::default();
        let units: Vec<String> = (0..200).map(|i| "x".repeat(1 + i * 97 % 5000)).collect();
        let pos: Vec<Pos> = units.iter().map(|u| c.push(u)).collect();
        for (u, p) in units.iter().zip(&pos) {
            assert_eq!(c.get(*p, u.len()), Some(u.as_str()));
        }
        let end = |i: usize| Pos {
            at: pos[i].at + units[i].len() as u32,
            ..pos[i]
        };
        for (a, b) in [(0, 199), (5, 6), (17, 180), (199, 199)] {
            assert_eq!(c.range(pos[a], end(b)).join(","), units[a..=b].join(","));
        }
        let total: usize = units.iter().map(|u| u.len() + 1).sum();
        assert!(
            c.weight() < total + CHUNK + 4096,
            "{} vs {total}",
            c.weight()
        );
        // A unit larger than a chunk gets one of its own.
        let big = "y".repeat(3 * CHUNK);
        let p = c.push(&big);
        assert_eq!(p.at, 0);
        assert_eq!(c.get(p, big.len()), Some(big.as_str()));
    }
}
