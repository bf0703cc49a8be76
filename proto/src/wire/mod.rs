//! REST bodies, events, ids and problem documents as they travel on the wire.
//!
//! Everything here is pure: ids are built from bytes the caller supplies and
//! timestamps from unix milliseconds the caller supplies.
//!
//! Submodules:
//! - [`ids`]: `ses_`/`evt_`/`key_`/`pro_`/`sba_` ids and `bae_…` secrets.
//! - [`time`]: `created_at` and SQLite datetime formatting.
//! - [`problem`]: RFC 7807 bodies and the error-type catalogue.
//! - [`content`]: content-block helpers over `serde_json::Value`.
//! - [`event`]: the closed `event_type` catalogue and the EventView shape.
//! - [`session`]: client-port session bodies (open/join/close/meta/...).
//! - [`compaction`]: the session compaction config.
//! - [`admin`]: admin-port bodies and views.
//! - [`export`]: the session export document (extension).
//! - [`fork`]: fork and rewind bodies (extension).
//! - [`page`]: pagination query parsing and page bodies.
//! - [`json`]: small JSON text helpers (string escaping).

pub mod admin;
pub mod compaction;
pub mod content;
pub mod event;
pub mod export;
pub mod fork;
pub mod hex;
pub mod ids;
pub mod json;
pub mod page;
pub mod problem;
pub mod session;
pub mod time;

pub use compaction::CompactionConfig;
pub use event::{event_view_json, push_event_view, EventType, EventView};
pub use ids::{is_id, is_secret, make_id, make_secret, IdKind, SecretKind};
pub use page::{parse_page_query, Page};
pub use problem::{Problem, ProblemType};
pub use session::{
    parse_join, parse_open, ClientToolDef, JoinSessionRequest, OpenSessionRequest, SessionState,
    SubagentToolDef,
};
pub use time::{format_created_at, format_sqlite_datetime};
