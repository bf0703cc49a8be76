//! Pagination (spec 01 §3.3): `?cursor=<opaque>&limit=<n>` →
//! `{"items": [...], "next_cursor": <string|null>}`.
//!
//! The cursor is the decimal rowid of the last item returned; an empty
//! cursor means "from the start". Query values are expected already
//! percent-decoded.

use serde::{Deserialize, Serialize};

/// Default page size.
pub const DEFAULT_LIMIT: usize = 50;
/// Maximum page size (larger values are clamped, not rejected).
pub const MAX_LIMIT: usize = 200;

/// A page of items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// Items in insertion order.
    pub items: Vec<T>,
    /// Cursor of the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// Build a page from up to `limit + 1` fetched rows `(rowid, item)`:
    /// when more than `limit` rows were fetched the extra row is dropped and
    /// `next_cursor` is the rowid of the last kept item.
    pub fn from_rows(mut rows: Vec<(u64, T)>, limit: usize) -> Self {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next_cursor = if more {
            rows.last().map(|(rowid, _)| rowid.to_string())
        } else {
            None
        };
        Page {
            items: rows.into_iter().map(|(_, t)| t).collect(),
            next_cursor,
        }
    }
}

/// `400` detail for an unparsable cursor: `invalid cursor: "<value>"`.
pub fn invalid_cursor_detail(cursor: &str) -> String {
    format!("invalid cursor: {cursor:?}")
}

/// `400` detail for a zero, negative or non-integer limit.
pub fn invalid_limit_detail(limit: &str) -> String {
    format!("invalid limit: {limit:?}; expected a positive integer")
}

/// Parse the pagination query.
///
/// Returns `(after_rowid, limit)`: `after_rowid` is `None` for an absent or
/// empty cursor; `limit` defaults to 50 (absent or empty) and is clamped to
/// 200. A cursor that is not a decimal `u64`, or a limit that is `<= 0` or
/// not an integer, is an error whose text is the 400 `bad_request` detail
/// (C-041, C-042).
pub fn parse_page_query(
    cursor: Option<&str>,
    limit: Option<&str>,
) -> Result<(Option<u64>, usize), String> {
    let after = match cursor {
        None | Some("") => None,
        Some(c) => {
            if !c.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid_cursor_detail(c));
            }
            Some(c.parse::<u64>().map_err(|_| invalid_cursor_detail(c))?)
        }
    };
    let limit = match limit {
        None | Some("") => DEFAULT_LIMIT,
        Some(l) => match l.parse::<i64>() {
            Ok(n) if n <= 0 => return Err(invalid_limit_detail(l)),
            Ok(n) => usize::try_from(n).map_or(MAX_LIMIT, |n| n.min(MAX_LIMIT)),
            Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => MAX_LIMIT,
            Err(_) => return Err(invalid_limit_detail(l)),
        },
    };
    Ok((after, limit))
}

/// Concatenate already-serialized items into a page body
/// `{"items":[…],"next_cursor":…}` (fast path for EventView JSON strings).
pub fn page_json<S: AsRef<str>>(items_json: &[S], next_cursor: Option<&str>) -> String {
    let cap = items_json
        .iter()
        .map(|s| s.as_ref().len() + 1)
        .sum::<usize>()
        + 40;
    let mut out = String::with_capacity(cap);
    push_page(
        &mut out,
        items_json,
        |o, s| o.push_str(s.as_ref()),
        next_cursor,
    );
    out
}

/// A page body appended to `out`, each item written by `push_item` (so a
/// caller can render items straight into the page's buffer).
pub fn push_page<T>(
    out: &mut String,
    items: &[T],
    mut push_item: impl FnMut(&mut String, &T),
    next_cursor: Option<&str>,
) {
    out.push_str(PAGE_OPEN);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_item(out, item);
    }
    push_page_close(out, next_cursor);
}

/// What a page body starts with; items follow, separated by commas, then
/// [`push_page_close`] (for a writer that learns its cursor only after the
/// last item).
pub const PAGE_OPEN: &str = "{\"items\":[";

/// The end of a page body begun with [`PAGE_OPEN`].
pub fn push_page_close(out: &mut String, next_cursor: Option<&str>) {
    out.push_str("],\"next_cursor\":");
    super::json::push_opt_str(out, next_cursor);
    out.push('}');
}
