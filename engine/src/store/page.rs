//! Rendered page reads ([`StoreRead::EventsPage`], [`StoreRead::ReplayPage`]):
//! which rows a page takes, and the bytes it leaves the store as.
//!
//! A page is bounded twice: by its `limit` of events and by `max_bytes` of
//! payload text. The byte bound keeps one answer from holding a session's
//! whole history in memory (each `provider.request` repeats it), so a page
//! of large events is cut short and says that more exist; paging clients
//! follow `next_cursor` as for any other page. The first row is always
//! taken, so every page makes progress. Every store reads a page through
//! [`collect_page`], so they cut it at the same row.

use super::{EventRow, ReadResult, RenderedEvent, StoreRead};

/// A store's ascending row cursor over a page's plain read
/// ([`page_rows_read`]).
pub trait RowCursor {
    type Error;
    /// Moves to the next row; `false` when there is none.
    fn advance(&mut self) -> Result<bool, Self::Error>;
    /// The row moved to (read only when the page takes it).
    fn row(&mut self) -> Result<EventRow, Self::Error>;
}

/// The bounds of a page read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageBounds {
    pub limit: usize,
    pub max_bytes: usize,
}

impl PageBounds {
    /// The bounds of a rendered read; `None` for any other read.
    pub fn of(read: &StoreRead) -> Option<PageBounds> {
        match read {
            StoreRead::EventsPage {
                limit, max_bytes, ..
            }
            | StoreRead::ReplayPage {
                limit, max_bytes, ..
            }
            | StoreRead::ExportPage {
                limit, max_bytes, ..
            } => Some(PageBounds {
                limit: *limit,
                max_bytes: *max_bytes,
            }),
            _ => None,
        }
    }
}

/// What an EventView adds to [`row_bytes`] (its `created_at` and
/// `client_key_id` texts), so a rendering is sized without a regrowth.
const VIEW_SLACK: usize = 64;

/// What one row counts against a page's byte bound: its payload and the
/// EventView members around it.
pub fn row_bytes(row: &EventRow) -> usize {
    weigh(&row.id, &row.session_id, &row.event_type, &row.payload)
}

/// [`row_bytes`] of a row's columns (for a store that renders a page
/// straight from its columns and must cut it at the same row).
pub fn weigh(id: &str, session_id: &str, event_type: &str, payload: &str) -> usize {
    payload.len() + id.len() + session_id.len() + event_type.len() + 96
}

/// Takes a page's rows from `cursor`: at most `limit`, and no further row
/// once `max_bytes` are taken. Returns the rows and whether another row
/// exists after them (looked at without reading it).
pub fn collect_page<C: RowCursor>(
    cursor: &mut C,
    bounds: PageBounds,
) -> Result<(Vec<EventRow>, bool), C::Error> {
    let mut rows = Vec::new();
    let mut bytes = 0usize;
    while cursor.advance()? {
        if rows.len() >= bounds.limit || (!rows.is_empty() && bytes >= bounds.max_bytes) {
            return Ok((rows, true));
        }
        let row = cursor.row()?;
        bytes = bytes.saturating_add(row_bytes(&row));
        rows.push(row);
    }
    Ok((rows, false))
}

/// Cuts rows that were read whole (a store that expands stored payloads
/// after reading them) at the same row [`collect_page`] would; returns
/// whether any were cut.
pub fn trim_page(rows: &mut Vec<EventRow>, bounds: PageBounds) -> bool {
    let mut bytes = 0usize;
    let keep = rows
        .iter()
        .take(bounds.limit)
        .take_while(|r| {
            let take = bytes < bounds.max_bytes || bytes == 0;
            bytes = bytes.saturating_add(row_bytes(r));
            take
        })
        .count();
    let cut = keep < rows.len();
    rows.truncate(keep);
    cut
}

/// A rendered read as the plain rows it is made of: the page's events
/// after its cursor, one more than it shows (a store's cursor only looks
/// at that one, to say whether more exist).
pub fn page_rows_read(read: &StoreRead) -> Option<StoreRead> {
    match read {
        StoreRead::EventsPage {
            session_id,
            after_seq,
            limit,
            ..
        }
        | StoreRead::ReplayPage {
            session_id,
            after_seq,
            limit,
            ..
        }
        | StoreRead::ExportPage {
            session_id,
            after_seq,
            limit,
            ..
        } => Some(StoreRead::Events {
            session_id: session_id.clone(),
            after_seq: *after_seq,
            limit: limit.saturating_add(1),
        }),
        _ => None,
    }
}

/// What a rendered read answers, from the rows [`collect_page`] took and
/// whether more exist; `None` for any other read.
pub fn render_page(read: &StoreRead, rows: &[EventRow], more: bool) -> Option<ReadResult> {
    match read {
        StoreRead::EventsPage { .. } => {
            Some(ReadResult::Page(render_events_page(rows, more).into()))
        }
        StoreRead::ReplayPage { .. } => Some(ReadResult::Frames {
            frames: render_event_frames(rows),
            more,
        }),
        StoreRead::ExportPage { .. } => Some(ReadResult::ExportPage {
            chunk: render_export_chunk(rows),
            events: rows.len() as u64,
            last_seq: rows.last().map_or(0, |r| r.seq),
            more,
        }),
        _ => None,
    }
}

/// A rendered read answered from its plain read's rows already in memory
/// (the in-memory store): cut where [`collect_page`] would cut them.
pub fn render_from_rows(read: &StoreRead, mut rows: Vec<EventRow>) -> Option<ReadResult> {
    let more = trim_page(&mut rows, PageBounds::of(read)?);
    render_page(read, &rows, more)
}

/// The body of an events page: `{"items":[EventView…],"next_cursor":…}`,
/// each payload copied in as stored, never re-parsed; the cursor is the
/// last shown seq when more exist.
pub fn render_events_page(rows: &[EventRow], more: bool) -> Vec<u8> {
    let cursor = more
        .then(|| rows.last().map(|r| r.seq.to_string()))
        .flatten();
    // One buffer sized up front: each payload is copied once, straight
    // from its row (the same bytes `page_json` of the items would give).
    let cap = rows
        .iter()
        .map(|r| row_bytes(r) + VIEW_SLACK)
        .sum::<usize>()
        + 64;
    let mut out = String::with_capacity(cap);
    proto::wire::page::push_page(
        &mut out,
        rows,
        |o, r| r.push_view_json(o),
        cursor.as_deref(),
    );
    out.into_bytes()
}

/// The `session.event` frames of `rows` (payloads copied in as stored).
pub fn render_event_frames(rows: &[EventRow]) -> Vec<RenderedEvent> {
    rows.iter()
        .map(|r| RenderedEvent {
            seq: r.seq,
            id: r.id.clone(),
            frame: super::encode_frame(&proto::jsonrpc::event_frame(&r.view_json())),
        })
        .collect()
}

/// The export document's lines of `rows` (`proto::wire::export`), each
/// payload copied in as stored, as one HTTP chunk (empty for no rows).
pub fn render_export_chunk(rows: &[EventRow]) -> Vec<u8> {
    if rows.is_empty() {
        return Vec::new();
    }
    let cap = rows
        .iter()
        .map(|r| row_bytes(r) + VIEW_SLACK)
        .sum::<usize>();
    let mut lines = String::with_capacity(cap);
    for r in rows {
        proto::wire::export::push_event_line(
            &mut lines,
            &r.id,
            &r.session_id,
            r.client_key_id.as_deref(),
            &r.event_type,
            &r.payload,
            &r.created_at,
        );
        lines.push('\n');
    }
    let mut out = Vec::with_capacity(lines.len() + 16);
    proto::http::encode_chunk(lines.as_bytes(), &mut out);
    out
}

impl EventRow {
    /// The EventView JSON of the row (its payload copied in as stored).
    pub fn view_json(&self) -> String {
        let mut out = String::with_capacity(row_bytes(self) + VIEW_SLACK);
        self.push_view_json(&mut out);
        out
    }

    /// [`EventRow::view_json`] appended to `out`.
    pub fn push_view_json(&self, out: &mut String) {
        proto::wire::push_event_view(
            out,
            &self.id,
            &self.session_id,
            self.client_key_id.as_deref(),
            &self.event_type,
            &self.payload,
            &self.created_at,
        )
    }
}

#[cfg(test)]
mod tests;
