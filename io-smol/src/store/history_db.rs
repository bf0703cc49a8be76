//! `provider.request` histories stored once, against SQLite: the chunk
//! rows of `bae_history_chunks`, written in the transaction of the event
//! row that first needs them, and the expansion of stored rows on every
//! read. The text format is `history.rs`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use super::history::{self, Header, Known, SessionKnown};
use super::*;

/// Chunk bodies by ord, for one session.
type Chunks = BTreeMap<i64, String>;

impl<'c> StoreConn<'c> {
    /// The text to store in `session_events.payload` for `e`: the payload
    /// itself, or for a `provider.request` its form with chunks (whose new
    /// chunk rows are inserted here, in the same transaction).
    pub(super) fn stored_payload<'e>(&mut self, e: &'e EventRow) -> Result<Cow<'e, str>> {
        if e.event_type != history::EVENT_TYPE || !e.payload.starts_with('{') {
            return Ok(Cow::Borrowed(&e.payload));
        }
        if !self.shared_history {
            // Stored whole; a payload that looks like the chunked form is
            // still escaped, so reads stay exact.
            let escaped = history::escape(&e.payload);
            return Ok(escaped.map_or(Cow::Borrowed(e.payload.as_str()), Cow::Owned));
        }
        let session = e.session_id.as_str();
        self.touched.push(session.to_string());
        let mut known = match self.history.take(session) {
            Some(k) => k,
            None => self.known_from_db(session)?,
        };
        let next_ord = self.next_chunk_ord(session)?;
        let stored = match history::compact(&e.payload, &mut known, next_ord) {
            Some(c) => {
                for chunk in &c.chunks {
                    let st = self.stmt(Q::InsertChunk)?;
                    st.bind((1, session))?;
                    st.bind((2, chunk.ord))?;
                    st.bind((3, chunk.body.as_str()))?;
                    finish(st)?;
                }
                Cow::Owned(c.payload)
            }
            None => {
                history::escape(&e.payload).map_or(Cow::Borrowed(e.payload.as_str()), Cow::Owned)
            }
        };
        self.history.put(session, known);
        Ok(stored)
    }

    /// What the session's newest stored `provider.request` says about its
    /// shared members (nothing for a row stored whole, e.g. by an older
    /// version of this server).
    fn known_from_db(&mut self, session: &str) -> Result<SessionKnown> {
        let newest = self.read_stored(&StoreRead::LatestOfType {
            session_id: session.to_string(),
            event_type: EventType::ProviderRequest,
            before_seq: None,
            limit: 1,
        })?;
        let mut known: SessionKnown = [None, None];
        let ReadResult::Events(rows) = newest else {
            return Ok(known);
        };
        let Some(Ok(Some(h))) = rows.first().map(|r| history::header(&r.payload)) else {
            return Ok(known);
        };
        let chunks = self.fetch_chunks(session, h.refs.iter().flat_map(|(_, r)| r.clone()))?;
        for (member, ranges) in &h.refs {
            let ords = ranges.iter().cloned().flatten();
            let bodies: Option<Vec<(i64, &str)>> = ords
                .map(|o| chunks.get(&o).map(|b| (o, b.as_str())))
                .collect();
            known[*member] = bodies.and_then(Known::from_chunks);
        }
        Ok(known)
    }

    fn next_chunk_ord(&mut self, session: &str) -> Result<i64> {
        let st = self.stmt(Q::LastChunkOrd)?;
        st.bind((1, session))?;
        let r = (|| {
            Ok(match st.next()? {
                State::Row => st.read::<i64, _>(0)? + 1,
                State::Done => 0,
            })
        })();
        let _ = st.reset();
        r
    }

    /// The chunks of `session` in the union of `ranges` (one range query per
    /// run of overlapping or adjacent ranges).
    fn fetch_chunks(
        &mut self,
        session: &str,
        ranges: impl IntoIterator<Item = Range<i64>>,
    ) -> Result<Chunks> {
        let mut ranges: Vec<Range<i64>> = ranges.into_iter().collect();
        ranges.sort_unstable_by_key(|r| r.start);
        let mut merged: Vec<Range<i64>> = Vec::new();
        for r in ranges {
            match merged.last_mut() {
                Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
                _ => merged.push(r),
            }
        }
        let mut out = Chunks::new();
        for r in merged {
            let st = self.stmt(Q::SelectChunks)?;
            st.bind((1, session))?;
            st.bind((2, r.start))?;
            st.bind((3, r.end))?;
            let res = (|| -> Result<()> {
                while st.next()? == State::Row {
                    out.insert(st.read::<i64, _>(0)?, st.text(1)?);
                }
                Ok(())
            })();
            let _ = st.reset();
            res?;
        }
        Ok(out)
    }

    /// Replaces every stored form among `rows` by the original payload.
    pub(super) fn expand_rows(&mut self, rows: &mut [EventRow]) -> Result<()> {
        let corrupt = |r: &EventRow, detail: String| {
            StoreError::Corrupt(format!("provider.request {}: {detail}", r.id))
        };
        let mut stored: Vec<(usize, Header)> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            if r.event_type == history::EVENT_TYPE {
                if let Some(h) = history::header(&r.payload).map_err(|d| corrupt(r, d))? {
                    stored.push((i, h));
                }
            }
        }
        if stored.is_empty() {
            return Ok(());
        }
        // Every read is scoped to one session, but do not rely on it.
        let mut by_session: BTreeMap<String, Chunks> = BTreeMap::new();
        let mut sessions: Vec<&str> = stored
            .iter()
            .map(|(i, _)| rows[*i].session_id.as_str())
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        for session in sessions {
            let ranges = stored
                .iter()
                .filter(|(i, _)| rows[*i].session_id == session)
                .flat_map(|(_, h)| h.refs.iter().flat_map(|(_, r)| r.clone()));
            let chunks = self.fetch_chunks(session, ranges.collect::<Vec<_>>())?;
            by_session.insert(session.to_string(), chunks);
        }
        for (i, h) in stored {
            let r = &rows[i];
            let chunks = &by_session[&r.session_id];
            let payload = history::expand(&r.payload, &h, |o| chunks.get(&o).map(String::as_str))
                .map_err(|d| corrupt(r, d))?;
            rows[i].payload = payload;
        }
        Ok(())
    }
}
