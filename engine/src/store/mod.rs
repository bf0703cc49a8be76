//! The engine's view of durable storage.
//!
//! The engine never touches a database. It emits [`StoreWrite`]s (which the
//! driver commits, in emission order, one transaction per batch) and
//! [`StoreRead`]s (which the driver answers with [`ReadResult`]s). Both the
//! SQLite store in `io-smol` and the simulated store in `sim` implement
//! exactly these semantics.
//!
//! Ordering contract: a read is answered only after every write emitted
//! before it has been committed, so a read always observes the engine's own
//! earlier writes.

use serde_json::Value;

/// `session_events.event_type`: the wire catalogue.
pub use proto::wire::EventType;

/// Session lifecycle state (`sessions.state`): the wire type.
pub use proto::wire::SessionState;

/// `keys.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRole {
    Client,
    Session,
    Admin,
}

impl KeyRole {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Client => "client",
            KeyRole::Session => "session",
            KeyRole::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "client" => Some(KeyRole::Client),
            "session" => Some(KeyRole::Session),
            "admin" => Some(KeyRole::Admin),
            _ => None,
        }
    }
}

/// One `profiles` row. List members are stored as JSON arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRow {
    pub id: String,
    pub name: String,
    /// Stored in `provider_config` as a JSON string (historical column name).
    pub primary_provider: String,
    /// Stored in `fallback_configs`.
    pub fallback_providers: Vec<String>,
    pub mcp_servers: Vec<String>,
    /// Element types are not checked by the reference, so keep raw values.
    pub allowed_tools: Vec<Value>,
    pub available_sandboxes: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
    pub deleted_at: Option<String>,
}

/// One `keys` row. Only the SHA-256 digest of a key is ever stored.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    pub id: String,
    /// Client key: operator label. Session key: the session id it is bound to.
    /// Admin key: `bootstrap-admin` or the hash file's name.
    pub name: String,
    /// 64 lowercase hex characters (or a legacy Argon2id PHC string).
    pub key_hash: String,
    pub key_prefix: String,
    pub role: KeyRole,
    pub profile_id: Option<String>,
    /// Session keys: the client key they were minted for.
    pub client_id: Option<String>,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub deleted_at: Option<String>,
}

/// One `sessions` row. The three tool maps are the stored JSON text of
/// objects keyed by client key id (`{"key_…": [tool, …]}`; `{}` for a
/// NULL column), kept as text so that no layer parses them to move them.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub id: String,
    pub client_key_id: String,
    pub profile_id: String,
    pub state: SessionState,
    pub client_version: Option<String>,
    pub client_tools: String,
    pub sandbox_tools: String,
    pub subagent_tools: String,
    /// Normalised compaction config as JSON text; `None` = client mode
    /// without prompt.
    pub compaction: Option<String>,
    pub created_at: String,
    pub closed_at: Option<String>,
}

/// One `session_events` row. `seq` is the SQLite rowid: the engine assigns
/// it (strictly increasing across the whole database) so that ordering and
/// cursors are known without a read.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub seq: u64,
    pub id: String,
    pub session_id: String,
    pub client_key_id: Option<String>,
    pub event_type: String,
    /// Payload as compact JSON text.
    pub payload: String,
    pub created_at: String,
}

/// One idempotency key of `session.sendMessage` (extension
/// `send.idempotent`), scoped to a session and a client key.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRow {
    pub session_id: String,
    pub client_key_id: String,
    pub key: String,
    /// SHA-256 hex of the message in canonical JSON (retries must match).
    pub digest: String,
    /// Unix milliseconds of the first use (retention runs from here).
    pub created_ms: u64,
    /// The request's terminal answer as JSON text (`{"result": {"message",
    /// "event_seqs"}}` or `{"error": {"code", "message"}}`), `None` while
    /// its turn runs.
    pub outcome: Option<String>,
}

/// One `bae_session_lineage` row (extension: where a forked or imported
/// session came from). Kept outside the reference tables, so plain
/// readers of the log never see it.
#[derive(Debug, Clone, PartialEq)]
pub struct LineageRow {
    pub session_id: String,
    pub origin: Origin,
    pub created_at: String,
    /// Seq of the last event copied into the session from its parent or
    /// document (0: none, or a row written before this was recorded).
    /// Its log is a faithful copy up to here, registrations included; the
    /// drivers a store recovers are only those registered after it (a
    /// fork starts with no drivers, issue 38, docs/extensions.md).
    pub copied_through: u64,
}

/// How a session of [`LineageRow`] came to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Forked from `parent_id` at its event `parent_event_id`.
    Fork {
        parent_id: String,
        parent_event_id: String,
    },
    /// Imported from a document whose source session had this id.
    Import { source_session_id: String },
}

/// One successful provider attempt's tokens (usage accounting,
/// `crate::usage`), written in the same batch as its `provider.response`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub session_id: String,
    /// The `provider.response` event's seq (one row per event).
    pub event_seq: u64,
    /// The seq and id of the first event the request that made the call
    /// appended (its turn, or its compaction).
    pub turn_seq: u64,
    pub turn_event_id: String,
    /// The acting client key.
    pub client_key_id: String,
    pub profile_id: String,
    /// The provider entry's name.
    pub provider: String,
    pub model: String,
    /// A compaction's summary call.
    pub compaction: bool,
    /// Unix milliseconds.
    pub created_ms: u64,
    pub tokens: proto::provider::Tokens,
}

/// One group of a usage query's sums (`crate::usage` renders them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageSum {
    /// The provider entry's name.
    pub provider: String,
    /// The turn (the seq and id of the first event its request appended),
    /// when the query asked for turns.
    pub turn_seq: Option<u64>,
    pub turn_event_id: Option<String>,
    pub calls: u64,
    pub tokens: proto::provider::Tokens,
}

/// What a usage query sums over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageScope {
    Session(String),
    ClientKey(String),
    Profile(String),
}

/// Whose quota (`crate::quotas`): a client key's or a profile's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaScope {
    Key(String),
    Profile(String),
}

impl QuotaScope {
    /// The stored `scope` column.
    pub fn kind(&self) -> &'static str {
        match self {
            QuotaScope::Key(_) => "key",
            QuotaScope::Profile(_) => "profile",
        }
    }

    pub fn id(&self) -> &str {
        match self {
            QuotaScope::Key(id) | QuotaScope::Profile(id) => id,
        }
    }

    /// The scope of stored columns (`None`: an unknown kind).
    pub fn from_columns(kind: &str, id: String) -> Option<Self> {
        match kind {
            "key" => Some(QuotaScope::Key(id)),
            "profile" => Some(QuotaScope::Profile(id)),
            _ => None,
        }
    }
}

/// A stored quota: its scope and the quota as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRow {
    pub scope: QuotaScope,
    pub quota: String,
    pub updated_at: String,
}

/// Open sessions of one creator key and profile (restored at start for
/// the open-session quotas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCount {
    pub client_key_id: String,
    pub profile_id: String,
    pub open: u64,
}

/// A durable change. The driver applies writes in emission order and commits
/// each batch atomically before releasing any output emitted after them.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreWrite {
    InsertProfile(ProfileRow),
    /// Full replacement of the row with the same id.
    UpdateProfile(ProfileRow),
    InsertKey(KeyRow),
    /// Soft delete: sets `deleted_at`.
    RevokeKey {
        id: String,
        at: String,
    },
    /// Replica mode: soft-deletes every active session key minted for the
    /// client key `client_id` (a revocation's cascade, including keys this
    /// replica has not heard of yet).
    RevokeSessionKeysOf {
        client_id: String,
        at: String,
    },
    /// Replace `key_hash` (legacy Argon2id upgrade on first use).
    SetKeyHash {
        id: String,
        key_hash: String,
    },
    /// Stamps `last_used_at`. Not a durability point: never gates output.
    TouchKey {
        id: String,
        at: String,
    },
    InsertSession(SessionRow),
    SetSessionState {
        id: String,
        state: SessionState,
        closed_at: Option<String>,
    },
    /// Replaces the three per-client tool columns of a session.
    SetSessionTools {
        id: String,
        client_tools: String,
        sandbox_tools: String,
        subagent_tools: String,
    },
    InsertEvent(EventRow),
    /// Replica mode: this replica takes the lease of the session it just
    /// created (a new id: nobody else can hold it). Other stores ignore it.
    LeaseNewSession {
        session_id: String,
    },
    /// Insert or replace (by session, client key and key).
    PutIdempotency(IdempotencyRow),
    /// Keys older than the retention: `created_ms < before_ms`.
    ExpireIdempotency {
        before_ms: u64,
    },
    /// Records where a new session came from (fork or import).
    InsertLineage(LineageRow),
    /// One attempt's tokens; a row for the same event replaces nothing
    /// (it is ignored).
    InsertUsage(UsageRow),
    /// Insert or replace a quota (by scope).
    PutQuota(QuotaRow),
    DeleteQuota(QuotaScope),
}

impl StoreWrite {
    /// Whether outputs emitted after this write must wait for its commit.
    pub fn gates_output(&self) -> bool {
        !matches!(self, StoreWrite::TouchKey { .. })
    }
}

/// Correlates a [`StoreRead`] with its [`ReadResult`].
pub use crate::ids::ReadId;

mod error;
pub mod page;
pub use error::ReadError;
pub use page::{
    page_rows_read, render_event_frames, render_events_page, render_export_chunk, render_from_rows,
    render_page,
};

/// A query the engine needs answered.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreRead {
    /// Events of one session with `seq > after_seq`, ascending, at most `limit`.
    Events {
        session_id: String,
        after_seq: u64,
        limit: usize,
    },
    /// The `seq` of event `event_id` if it belongs to `session_id`.
    EventSeq {
        session_id: String,
        event_id: String,
    },
    /// Up to `limit` events of one type of one session, newest first
    /// (descending `seq`), only those with `seq < before_seq` when set.
    LatestOfType {
        session_id: String,
        event_type: EventType,
        before_seq: Option<u64>,
        limit: usize,
    },
    /// The event `event_id` if it belongs to `session_id` (0 or 1 row).
    EventById {
        session_id: String,
        event_id: String,
    },
    /// Every event of one session whose type is one of `event_types` and
    /// whose `seq >= from_seq`, ascending.
    OfTypesFrom {
        session_id: String,
        event_types: Vec<EventType>,
        from_seq: u64,
    },
    /// The events of one session with these seqs, ascending (missing ones
    /// are skipped).
    EventsAt { session_id: String, seqs: Vec<u64> },
    /// One `GET …/events` page, rendered by the store: up to `limit` events
    /// with `seq > after_seq`, and no more once `max_bytes` of them are
    /// taken (see [`page`]), as the page body ([`render_events_page`]).
    /// Rendering on the store's thread keeps a large page's bytes off the
    /// engine's.
    EventsPage {
        session_id: String,
        after_seq: u64,
        limit: usize,
        max_bytes: usize,
    },
    /// One `session.subscribe` replay page, rendered by the store: up to
    /// `limit` events with `seq > after_seq`, each as the chunk-encoded
    /// `session.event` frame the stream sends (see [`render_event_frames`]),
    /// so a page of large events costs the engine no serialising.
    ReplayPage {
        session_id: String,
        after_seq: u64,
        limit: usize,
        max_bytes: usize,
    },
    /// One page of a session export, rendered by the store: up to `limit`
    /// events with `seq > after_seq`, no more once `max_bytes` of them are
    /// taken, as the JSON Lines of the export document in one HTTP chunk
    /// ([`page::render_export_chunk`]).
    ExportPage {
        session_id: String,
        after_seq: u64,
        limit: usize,
        max_bytes: usize,
    },
    /// The lineage row of `session_id` (if any) and, when `children`, the
    /// rows of the sessions forked from it, in creation order. Answered
    /// with [`ReadResult::Lineage`].
    Lineage { session_id: String, children: bool },
    /// Process and store figures for `GET /metrics` (answered by the
    /// runtime's store thread, which commits and can read `/proc`).
    Runtime,
    /// Replica mode only (docs/scaling.md): take the session's lease for
    /// this replica when it is free or expired, else say who holds it,
    /// with the client keys of its `session.driver.register` events with
    /// `seq >= drivers_since` (all of them with durable drivers, none
    /// otherwise: `u64::MAX`), never those copied into it
    /// ([`LineageRow::copied_through`]). Answered with [`ReadResult::Lease`] by the
    /// PostgreSQL store; `MemStore` answers [`Lease::Mine`] from its own
    /// rows, SQLite with an error (replica mode needs PostgreSQL).
    ClaimLease {
        session_id: String,
        drivers_since: u64,
    },
    /// One session as stored, to bring it back into the catalogue
    /// (`crate::residency`): its row, its active session keys, and the
    /// client keys of its `session.driver.register` events with
    /// `seq >= drivers_since` (an open session's registrations since this
    /// process started, or all of them with durable drivers), never those
    /// copied into it ([`LineageRow::copied_through`]). Answered with
    /// [`ReadResult::Session`].
    LoadSession {
        session_id: String,
        drivers_since: u64,
    },
    /// Every session with an active session key minted for `client_id`, as
    /// [`StoreRead::LoadSession`] reads one (the revocation cascade of a
    /// client key, spec 03 §4.2). Answered with [`ReadResult::Sessions`].
    SessionsOfClient {
        client_id: String,
        drivers_since: u64,
    },
    /// Up to `limit` session rows after the row whose position is
    /// `after` (0: from the first), in creation order, of one state when
    /// set (`GET /admin/v1/sessions`). Answered with
    /// [`ReadResult::SessionList`].
    SessionList {
        after: u64,
        limit: usize,
        state: Option<SessionState>,
    },
    /// Sums of the usage rows of `scope` with `since_ms <= created_ms <
    /// until_ms` (each bound optional), grouped by provider entry and, with
    /// `by_turn`, by turn (ascending `turn_seq`, then provider). Answered
    /// with [`ReadResult::Usage`].
    Usage {
        scope: UsageScope,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
        by_turn: bool,
    },
}

impl StoreRead {
    /// The session a read is scoped to (`""` for [`StoreRead::Runtime`]).
    pub fn session_id(&self) -> &str {
        match self {
            StoreRead::Runtime
            | StoreRead::SessionsOfClient { .. }
            | StoreRead::SessionList { .. }
            | StoreRead::Usage { .. } => "",
            StoreRead::Events { session_id, .. }
            | StoreRead::EventsPage { session_id, .. }
            | StoreRead::ReplayPage { session_id, .. }
            | StoreRead::ExportPage { session_id, .. }
            | StoreRead::Lineage { session_id, .. }
            | StoreRead::EventSeq { session_id, .. }
            | StoreRead::LatestOfType { session_id, .. }
            | StoreRead::EventById { session_id, .. }
            | StoreRead::OfTypesFrom { session_id, .. }
            | StoreRead::EventsAt { session_id, .. }
            | StoreRead::ClaimLease { session_id, .. }
            | StoreRead::LoadSession { session_id, .. } => session_id,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReadResult {
    Events(Vec<EventRow>),
    EventSeq(Option<u64>),
    Runtime(crate::metrics::RuntimeStats),
    /// The body of an events page (`{"items":[…],"next_cursor":…}`);
    /// shared, so a store may reuse its buffer once the page is written.
    Page(crate::bytes::Bytes),
    /// A replay page's events as ready-to-send frames, ascending, and
    /// whether more events follow them.
    Frames {
        frames: Vec<RenderedEvent>,
        more: bool,
    },
    /// An export page: its lines as one HTTP chunk, how many events it
    /// holds, the last one's seq (the next page's cursor) and whether more
    /// events follow.
    ExportPage {
        chunk: Vec<u8>,
        events: u64,
        last_seq: u64,
        more: bool,
    },
    /// The answer to [`StoreRead::Lineage`].
    Lineage {
        own: Option<LineageRow>,
        children: Vec<LineageRow>,
    },
    /// The answer to [`StoreRead::ClaimLease`].
    Lease(Lease),
    /// The answer to [`StoreRead::LoadSession`] (`None`: no such session).
    Session(Option<Box<StoredSession>>),
    /// The answer to [`StoreRead::SessionsOfClient`], in creation order.
    Sessions(Vec<StoredSession>),
    /// The answer to [`StoreRead::SessionList`]: `(position, row)` pairs
    /// and whether more rows follow.
    SessionList {
        rows: Vec<(u64, SessionRow)>,
        more: bool,
    },
    /// The answer to [`StoreRead::Usage`].
    Usage(Vec<UsageSum>),
}

/// A session as stored, with what the catalogue holds of it
/// ([`StoreRead::LoadSession`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    pub session: SessionRow,
    /// Its active session keys.
    pub keys: Vec<KeyRow>,
    /// Distinct client key ids of its `session.driver.register` events
    /// from the requested seq on and after those it copied, in log order
    /// (empty unless open).
    pub drivers: Vec<String>,
}

/// Who serves a session (replica mode, [`StoreRead::ClaimLease`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Lease {
    /// The database holds no such session.
    NoSession,
    /// This replica holds the lease now; the session as stored.
    Mine(Box<Claimed>),
    /// Another replica holds an unexpired lease: its client address
    /// (`host:port`, as it advertised it).
    Elsewhere { addr: String },
}

/// A session as stored when its lease was taken: what the new owner
/// replaces its catalogue entry with (the previous owner may have changed
/// the row, minted keys and appended events since this replica looked).
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub session: SessionRow,
    /// Active session keys bound to it.
    pub keys: Vec<KeyRow>,
    /// Largest `seq` of its events (0 when none).
    pub max_seq: u64,
    /// Its stored `sendMessage` idempotency keys.
    pub idempotency: Vec<IdempotencyRow>,
    /// Distinct client key ids of its `session.driver.register` events
    /// from the claim's `drivers_since` on, in log order (empty unless
    /// open): the registrations that follow it with durable drivers.
    pub drivers: Vec<String>,
}

/// Catalogue rows another replica committed (replica mode: read by the
/// driver after a `LISTEN/NOTIFY` notice, fed as [`crate::Input::Catalog`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogUpdate {
    pub profiles: Vec<ProfileRow>,
    /// Active keys (client, admin and session keys).
    pub keys: Vec<KeyRow>,
    /// Revoked keys.
    pub revoked: Vec<KeyRow>,
    pub sessions: Vec<SessionRow>,
    /// Quotas set and removed.
    pub quotas: Vec<QuotaRow>,
    pub quotas_removed: Vec<QuotaScope>,
    /// Every row, read once when the notices start (not a change: no
    /// revocation cascade runs for it).
    pub full: bool,
}

/// One event as a subscriber's stream sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedEvent {
    pub seq: u64,
    pub id: String,
    /// The chunk-encoded `session.event` NDJSON line.
    pub frame: Vec<u8>,
}

/// One NDJSON line as the bytes of its HTTP chunk, U+2028/2029/0085
/// escaped (`proto::jsonrpc::escape_line_separators`).
pub fn encode_frame(line: &str) -> Vec<u8> {
    let line = proto::jsonrpc::escape_line_separators(line);
    let mut bytes = Vec::with_capacity(line.len() + 12);
    proto::http::encode_chunk(line.as_bytes(), &mut bytes);
    bytes
}

/// The chunk of a live `session.event` frame around an EventView whose
/// line separators are already escaped ([`crate::streams::Appended`]): one
/// allocation and one copy, no second scan.
pub fn encode_event_frame(escaped_view: &str) -> Vec<u8> {
    use proto::jsonrpc::{EVENT_FRAME_HEAD, EVENT_FRAME_TAIL};
    let len = EVENT_FRAME_HEAD.len() + escaped_view.len() + EVENT_FRAME_TAIL.len();
    let mut bytes = Vec::with_capacity(len + 12);
    proto::http::encode_chunk_head(len, &mut bytes);
    bytes.extend_from_slice(EVENT_FRAME_HEAD.as_bytes());
    bytes.extend_from_slice(escaped_view.as_bytes());
    bytes.extend_from_slice(EVENT_FRAME_TAIL.as_bytes());
    bytes.extend_from_slice(b"\r\n");
    bytes
}

/// Whether a [`Snapshot`] carries every session, or leaves them in the
/// store for the engine to load on first use (`crate::residency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotScope {
    /// Every session, its session keys and (open sessions') driver
    /// registrations.
    #[default]
    Full,
    /// Profiles, client and admin keys only; sessions are counted.
    Lazy,
}

/// What the engine is restored from at start: everything but events.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// All profiles, including soft-deleted ones (names stay unique).
    pub profiles: Vec<ProfileRow>,
    /// Active (not revoked) keys of every role (no session keys when
    /// [`SnapshotScope::Lazy`]).
    pub keys: Vec<KeyRow>,
    /// All sessions in creation (rowid) order (none when lazy).
    pub sessions: Vec<SessionRow>,
    /// Sessions in the store, and how many of them are open.
    pub stored_sessions: SessionCounts,
    /// Largest event `seq` in the database (0 when empty).
    pub max_event_seq: u64,
    /// `(session_id, client_key_id)` of every `session.driver.register`
    /// event on an open session, in log order, but those a fork or an
    /// import copied ([`LineageRow::copied_through`]) (used when durable
    /// driver registrations are enabled).
    /// (None when lazy: each session's are read when it is loaded.)
    pub drivers: Vec<(String, String)>,
    /// Events in the log.
    pub events_total: u64,
    /// Every stored idempotency key (the engine drops expired ones).
    pub idempotency: Vec<IdempotencyRow>,
    /// Every stored quota.
    pub quotas: Vec<QuotaRow>,
    /// Open sessions by creator key and profile (every session, even
    /// when lazy).
    pub open_sessions: Vec<OpenCount>,
}

/// Session counts of the store (`bae.sessions.total`, `…open`,
/// `bae.drivers.registered`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionCounts {
    pub total: u64,
    pub open: u64,
    /// Distinct `(session, client key)` pairs of `session.driver.register`
    /// events on open sessions (not copied ones).
    pub drivers: u64,
}

#[cfg(test)]
mod frame_tests {
    /// The one-copy live frame is byte for byte the general encoder's.
    #[test]
    fn event_frame_chunk_equals_the_general_encoding() {
        for view in ["{}", "{\"payload\":{\"text\":\"a\\u2028b é\"}}"] {
            let general = super::encode_frame(&proto::jsonrpc::event_frame(view));
            assert_eq!(super::encode_event_frame(view), general);
        }
    }
}
