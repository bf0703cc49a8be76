use super::*;
use crate::store::encode_frame;

fn row(seq: u64) -> EventRow {
    EventRow {
        seq,
        id: format!("evt_{seq:032x}"),
        session_id: "ses_1".into(),
        client_key_id: None,
        event_type: "session.join".into(),
        payload: format!("{{\"n\":{seq}}}"),
        created_at: "2026-12-01T00:00:00.000Z".into(),
    }
}

fn big(seq: u64, bytes: usize) -> EventRow {
    let mut r = row(seq);
    r.payload = format!("{{\"t\":\"{}\"}}", "x".repeat(bytes));
    r
}

fn page(limit: usize, max_bytes: usize) -> StoreRead {
    StoreRead::EventsPage {
        session_id: "ses_1".into(),
        after_seq: 0,
        limit,
        max_bytes,
    }
}

fn body(result: Option<ReadResult>) -> serde_json::Value {
    let Some(ReadResult::Page(bytes)) = result else {
        panic!("not a page");
    };
    serde_json::from_slice(&bytes).unwrap()
}

/// A vector as a store cursor, counting the rows it was asked to read.
struct Rows(Vec<EventRow>, usize, usize);

impl RowCursor for Rows {
    type Error = ();
    fn advance(&mut self) -> Result<bool, ()> {
        self.1 += 1;
        Ok(self.1 <= self.0.len())
    }
    fn row(&mut self) -> Result<EventRow, ()> {
        self.2 += 1;
        self.0.get(self.1 - 1).cloned().ok_or(())
    }
}

#[test]
fn a_full_page_names_its_last_row_as_the_cursor() {
    let rows: Vec<EventRow> = (1..=3).map(row).collect();
    let v = body(render_from_rows(&page(2, usize::MAX), rows));
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    assert_eq!(v["items"][1]["payload"], serde_json::json!({"n": 2}));
    assert_eq!(v["next_cursor"], "2");
}

#[test]
fn the_last_page_has_a_null_cursor_and_payloads_are_copied_as_stored() {
    let mut r = row(7);
    r.payload = "{\"b\":1,   \"a\":2}".into();
    let body = String::from_utf8(render_events_page(&[r.clone()], false)).unwrap();
    assert!(body.starts_with("{\"items\":["), "{body}");
    assert!(body.ends_with("],\"next_cursor\":null}"), "{body}");
    assert!(body.contains(&r.view_json()), "{body}");
    assert!(
        body.contains("{\"b\":1,   \"a\":2}"),
        "not re-serialised: {body}"
    );
    assert_eq!(
        render_events_page(&[], false),
        b"{\"items\":[],\"next_cursor\":null}"
    );
}

/// A page of large events stops once its byte bound is reached and says
/// that more exist; the next page starts at the first row not shown.
#[test]
fn the_byte_bound_cuts_a_page_short_with_a_cursor() {
    let rows: Vec<EventRow> = (1..=6).map(|s| big(s, 1000)).collect();
    // Three rows reach 3 KB: the fourth is not taken.
    let v = body(render_from_rows(&page(5, 3000), rows.clone()));
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{v}");
    assert_eq!(v["next_cursor"], "3");
    // The same cut from a cursor, which reads only the rows it shows.
    let mut cursor = Rows(rows, 0, 0);
    let (taken, more) = collect_page(
        &mut cursor,
        PageBounds {
            limit: 5,
            max_bytes: 3000,
        },
    )
    .unwrap();
    assert_eq!((taken.len(), more, cursor.2), (3, true, 3));
}

/// One event larger than the bound still makes a page of its own, so
/// paging always progresses.
#[test]
fn an_event_over_the_bound_is_a_page_of_its_own() {
    let rows = vec![big(1, 10_000), row(2)];
    let v = body(render_from_rows(&page(100, 10), rows.clone()));
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["next_cursor"], "1");
    let v = body(render_from_rows(&page(100, 10), vec![big(1, 10_000)]));
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["next_cursor"], serde_json::Value::Null);
}

/// `collect_page` (stores with a row cursor) and `trim_page` (rows read
/// whole) cut every page at the same row, over sizes and bounds.
#[test]
fn cursor_and_in_memory_cuts_agree() {
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for _ in 0..500 {
        let n = next() % 8;
        let rows: Vec<EventRow> = (1..=n as u64).map(|s| big(s, next() % 3000)).collect();
        let bounds = PageBounds {
            limit: 1 + next() % 6,
            max_bytes: next() % 8000,
        };
        let mut cursor = Rows(rows.clone(), 0, 0);
        let (taken, more) = collect_page(&mut cursor, bounds).unwrap();
        let mut trimmed = rows.clone();
        let cut = trim_page(&mut trimmed, bounds);
        assert_eq!((taken.len(), more), (trimmed.len(), cut), "{bounds:?} {n}");
        assert!(!taken.is_empty() || rows.is_empty());
        assert!(taken.len() <= bounds.limit);
        assert_eq!(cursor.2, taken.len(), "read only the rows shown");
    }
}

/// A replay page leaves the store as the exact chunks a live stream
/// sends for the same events: one `session.event` line per row, line
/// separators escaped (spec 01 §6.3), payload bytes untouched.
#[test]
fn replay_pages_render_the_frames_a_stream_sends() {
    let mut r = row(3);
    r.payload = "{\"text\":\"a\u{2028}b\",  \"k\":1}".into();
    let read = StoreRead::ReplayPage {
        session_id: "ses_1".into(),
        after_seq: 2,
        limit: 200,
        max_bytes: usize::MAX,
    };
    assert_eq!(
        page_rows_read(&read),
        Some(StoreRead::Events {
            session_id: "ses_1".into(),
            after_seq: 2,
            limit: 201
        })
    );
    let Some(ReadResult::Frames { frames, more }) =
        render_from_rows(&read, vec![r.clone(), row(4)])
    else {
        panic!("not frames");
    };
    assert!(!more);
    assert_eq!(frames.len(), 2);
    assert_eq!((frames[0].seq, frames[0].id.as_str()), (3, r.id.as_str()));
    let line = proto::jsonrpc::event_frame(&r.view_json());
    assert_eq!(frames[0].frame, encode_frame(&line));
    let text = String::from_utf8(frames[0].frame.clone()).unwrap();
    assert!(
        text.contains("\\u2028") && !text.contains('\u{2028}'),
        "{text}"
    );
    assert!(
        text.contains(",  \"k\":1}"),
        "payload re-serialised: {text}"
    );
    let (size, body) = text.split_once("\r\n").unwrap();
    assert_eq!(usize::from_str_radix(size, 16).unwrap() + 2, body.len());
    assert!(body.ends_with("}\n\r\n"), "{body:?}");
}

#[test]
fn a_page_rendered_in_one_buffer_is_byte_identical_to_joined_items() {
    let mut rows: Vec<EventRow> = (1..=5).map(row).collect();
    rows[1].client_key_id = Some("key_1".into());
    rows[2].payload = "{\"text\":\"a \\\"quoted\\\" \\u2028 line\"}".into();
    rows[3].event_type = "odd\"type\n".into();
    for more in [false, true] {
        let items: Vec<String> = rows.iter().map(EventRow::view_json).collect();
        let cursor = more.then(|| "5".to_string());
        let want = proto::wire::page::page_json(&items, cursor.as_deref());
        assert_eq!(
            String::from_utf8(render_events_page(&rows, more)).unwrap(),
            want
        );
    }
    assert_eq!(
        render_events_page(&[], false),
        proto::wire::page::page_json::<String>(&[], None).into_bytes()
    );
}
