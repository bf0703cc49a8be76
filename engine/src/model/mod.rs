//! In-memory catalogue of profiles, keys and sessions: what hot paths need
//! without a store round trip. Events are never held here (they are read
//! from the store on demand).
//!
//! Kept compact because every open session lives here: ids are shared
//! `Arc<str>`s (a session id is one allocation however many indexes hold
//! it), stamps are 8-byte instants, empty tool maps allocate nothing, and
//! map values are boxed so the tables' spare capacity stays small.

mod bearer;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use proto::wire::problem::ProblemType;
use proto::wire::CompactionConfig;
use serde_json::Value;

use crate::auth;
pub use crate::decls::{DeclPool, ToolMap};
use crate::ids::{IdMap, IdSet, KeyId, ProfileId, SessionId};
use crate::store::{
    KeyRole, KeyRow, ProfileRow, SessionCounts, SessionRow, SessionState, Snapshot, StoreWrite,
};
use crate::time::{MonoMs, Stamp};

/// Id text shared by every index that holds it.
pub type SharedId = Arc<str>;

#[derive(Debug, Clone)]
pub struct Profile {
    pub row: ProfileRow,
}

impl Profile {
    pub fn is_live(&self) -> bool {
        self.row.deleted_at.is_none()
    }

    /// Whether `name` appears in `allowed_tools` (exact, case-sensitive).
    pub fn allows_tool(&self, name: &str) -> bool {
        self.row
            .allowed_tools
            .iter()
            .any(|t| t.as_str() == Some(name))
    }
}

/// A stored key digest: SHA-256, or a legacy Argon2id PHC string that is
/// upgraded on first use.
#[derive(Debug, Clone)]
pub enum StoredHash {
    Sha256([u8; 32]),
    /// A legacy Argon2id PHC string: verified once, then upgraded.
    Argon2(Box<str>),
    /// Unusable value: never matches (one corrupt row locks nobody out).
    Other,
}

#[derive(Debug, Clone)]
pub struct Key {
    pub id: KeyId,
    /// A session key's name is its session's id (shared with it).
    pub name: SharedId,
    pub hash: StoredHash,
    pub prefix: SharedId,
    pub role: KeyRole,
    pub profile_id: Option<ProfileId>,
    pub client_id: Option<KeyId>,
    pub created_at: Stamp,
    pub last_used_at: Option<Stamp>,
}

impl Key {
    /// The key of `row`, its ids taken from `ids` where already held.
    pub fn from_row(row: &KeyRow, ids: &Catalog) -> Self {
        let hash = match auth::parse_digest(&row.key_hash) {
            Some(d) => StoredHash::Sha256(d),
            None if row.key_hash.starts_with("$argon2id$") => {
                StoredHash::Argon2(row.key_hash.clone().into())
            }
            None => StoredHash::Other,
        };
        Key {
            id: ids.key_id(&row.id),
            name: ids.shared(&row.name),
            hash,
            prefix: ids.shared_prefix(&row.key_prefix),
            role: row.role,
            profile_id: row.profile_id.as_deref().map(|p| ids.profile_id(p)),
            client_id: row.client_id.as_deref().map(|c| ids.key_id(c)),
            created_at: Stamp::from_text(&row.created_at),
            last_used_at: row.last_used_at.as_deref().map(Stamp::from_text),
        }
    }

    pub fn matches(&self, candidate: &[u8; 32]) -> bool {
        match &self.hash {
            StoredHash::Sha256(d) => auth::ct_eq(d, candidate),
            StoredHash::Argon2(_) | StoredHash::Other => false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub id: SessionId,
    pub creator: KeyId,
    pub profile_id: ProfileId,
    pub state: SessionState,
    pub client_version: Option<Box<str>>,
    /// Per-client declarations, keyed by client key id.
    pub client_tools: ToolMap,
    pub sandbox_tools: ToolMap,
    pub subagent_tools: ToolMap,
    pub compaction: CompactionConfig,
    pub created_at: Stamp,
    pub closed_at: Option<Stamp>,
    /// Created by this process: its history is known to be empty, so the
    /// first turn needs no store read (not persisted).
    pub fresh: bool,
    /// Its `reconnect = true` MCP servers were looked at since this process
    /// started: set at create (the servers were connected at open), and by
    /// the first turn of a session from before a restart, which gets them
    /// back lazily.
    pub mcp_checked: bool,
    /// Its latest touch (`crate::residency`; not persisted).
    pub touched: u64,
}

impl Session {
    pub fn to_row(&self) -> SessionRow {
        SessionRow {
            id: self.id.to_string(),
            client_key_id: self.creator.to_string(),
            profile_id: self.profile_id.to_string(),
            state: self.state,
            client_version: self.client_version.as_deref().map(String::from),
            client_tools: self.client_tools.text().to_string(),
            sandbox_tools: self.sandbox_tools.text().to_string(),
            subagent_tools: self.subagent_tools.text().to_string(),
            compaction: Some(self.compaction.to_json()),
            created_at: self.created_at.text(),
            closed_at: self.closed_at.as_ref().map(Stamp::text),
        }
    }
}

/// Which keys a bearer token is checked against.
#[derive(Debug, Clone, Copy)]
pub enum KeyScope<'a> {
    Client,
    /// Session keys bound to this session id.
    Session(&'a str),
    Admin,
}

/// Profiles, keys and sessions with the indexes authentication needs.
#[derive(Debug, Default)]
pub struct Catalog {
    pub profiles: IdMap<ProfileId, Profile>,
    /// Profile ids in creation order (admin listing).
    pub profile_order: Vec<ProfileId>,
    /// Every profile name ever used, deleted ones included.
    pub profile_names: HashSet<String>,

    /// Active keys by id.
    pub keys: IdMap<KeyId, Box<Key>>,
    /// Active client key ids in creation order (admin listing).
    pub client_key_order: Vec<KeyId>,
    /// Active client keys by display prefix (first 8 characters).
    pub client_by_prefix: IdMap<SharedId, Vec<KeyId>>,
    /// Active session keys by the session they are bound to.
    pub session_keys: IdMap<SessionId, Vec<KeyId>>,
    /// Active admin keys.
    pub admin_keys: Vec<KeyId>,
    /// Display prefixes in use (every session key shares `bae_ses_`).
    prefixes: IdSet<SharedId>,
    /// The sessions' tool declarations, one copy per distinct text.
    pub decls: DeclPool,

    /// The sessions in use, and the most recently used idle ones
    /// (`crate::residency`; the store holds them all).
    pub sessions: IdMap<SessionId, Box<Session>>,
    /// Registered drivers per session (durable: rebuilt from the log).
    pub drivers: IdMap<SessionId, BTreeSet<KeyId>>,
    /// Rate-limited verification of legacy Argon2id digests.
    legacy: auth::LegacyUpgrade,
    /// Per client key and per profile quotas (an extension, off until an
    /// operator sets one).
    pub quotas: crate::quotas::Quotas,
}

impl Catalog {
    /// The catalogue of `snapshot`, whose profiles, keys, sessions and
    /// drivers it takes: each row is dropped once its record is built, so
    /// a restart never holds a large catalogue twice.
    pub fn restore(snapshot: &mut Snapshot, durable_drivers: bool) -> Self {
        let mut c = Catalog::default();
        for p in std::mem::take(&mut snapshot.profiles) {
            c.insert_profile(p);
        }
        // Client and admin keys before sessions, session keys after them, so
        // each id is allocated once and shared by everything naming it.
        let mut session_keys = Vec::new();
        for k in std::mem::take(&mut snapshot.keys) {
            if k.deleted_at.is_some() {
                continue;
            }
            if k.role == KeyRole::Session {
                session_keys.push(k);
            } else {
                let key = Key::from_row(&k, &c);
                c.insert_key(key);
            }
        }
        for s in std::mem::take(&mut snapshot.sessions) {
            let session = c.session_from_row(&s);
            c.insert_session(session);
        }
        for k in session_keys {
            let key = Key::from_row(&k, &c);
            c.insert_key(key);
        }
        let drivers = std::mem::take(&mut snapshot.drivers);
        for (sid, kid) in drivers.iter().filter(|_| durable_drivers) {
            if c.sessions.get(sid.as_str()).map(|s| s.state) == Some(SessionState::Open) {
                let (sid, kid) = (c.session_id(sid), c.key_id(kid));
                c.drivers.entry(sid).or_default().insert(kid);
            }
        }
        c
    }

    /// The sessions of `stored` (the store's counts) this catalogue does
    /// not hold: all of them after a lazy restore, none after a full one.
    /// Registrations count only when they survive restarts.
    pub fn unheld(&self, stored: SessionCounts, durable_drivers: bool) -> SessionCounts {
        let open = (self.sessions.values())
            .filter(|s| s.state == SessionState::Open)
            .count() as u64;
        let drivers = self.drivers.values().map(|d| d.len() as u64).sum::<u64>();
        SessionCounts {
            total: stored.total.saturating_sub(self.sessions.len() as u64),
            open: stored.open.saturating_sub(open),
            drivers: match durable_drivers {
                true => stored.drivers.saturating_sub(drivers),
                false => 0,
            },
        }
    }

    /// The session of `row`, its ids taken from the catalogue where
    /// already held and its declarations interned.
    pub fn session_from_row(&mut self, row: &SessionRow) -> Session {
        Session {
            id: self.session_id(&row.id),
            creator: self.key_id(&row.client_key_id),
            profile_id: self.profile_id(&row.profile_id),
            state: row.state,
            client_version: row.client_version.as_deref().map(Box::from),
            client_tools: ToolMap::from_text(&mut self.decls, &row.client_tools),
            sandbox_tools: ToolMap::from_text(&mut self.decls, &row.sandbox_tools),
            subagent_tools: ToolMap::from_text(&mut self.decls, &row.subagent_tools),
            compaction: CompactionConfig::from_stored(row.compaction.as_deref()),
            created_at: Stamp::from_text(&row.created_at),
            closed_at: row.closed_at.as_deref().map(Stamp::from_text),
            fresh: false,
            mcp_checked: false,
            touched: 0,
        }
    }

    /// `id` as an already-held shared id (a session, key or profile of
    /// this catalogue), else a new one.
    pub fn shared(&self, id: &str) -> SharedId {
        let held = (self.sessions.get_key_value(id).map(|(k, _)| k.shared()))
            .or_else(|| self.keys.get_key_value(id).map(|(k, _)| k.shared()))
            .or_else(|| self.profiles.get_key_value(id).map(|(k, _)| k.shared()));
        held.unwrap_or_else(|| SharedId::from(id))
    }

    /// [`Catalog::shared`] as a session id.
    pub fn session_id(&self, id: &str) -> SessionId {
        SessionId::from_shared(self.shared(id))
    }

    /// [`Catalog::shared`] as a key id.
    pub fn key_id(&self, id: &str) -> KeyId {
        KeyId::from_shared(self.shared(id))
    }

    /// [`Catalog::shared`] as a profile id.
    pub fn profile_id(&self, id: &str) -> ProfileId {
        ProfileId::from_shared(self.shared(id))
    }

    fn shared_prefix(&self, prefix: &str) -> SharedId {
        match self.prefixes.get(prefix) {
            Some(p) => p.clone(),
            None => SharedId::from(prefix),
        }
    }

    pub fn insert_profile(&mut self, row: ProfileRow) {
        let id = ProfileId::new(&row.id);
        self.profile_names.insert(row.name.clone());
        self.profile_order.push(id.clone());
        self.profiles.insert(id, Profile { row });
    }

    /// `"session is <state>, not open"` unless the session is open.
    pub fn open_error(&self, session_id: &str) -> Option<String> {
        match self.sessions.get(session_id).map(|s| s.state) {
            Some(SessionState::Open) => None,
            Some(state) => Some(format!("session is {}, not open", state.as_str())),
            None => Some("session no longer exists".to_string()),
        }
    }

    pub fn live_profile(&self, id: &str) -> Option<&Profile> {
        self.profiles.get(id).filter(|p| p.is_live())
    }

    pub fn insert_key(&mut self, key: Key) {
        self.prefixes.insert(key.prefix.clone());
        match key.role {
            KeyRole::Client => {
                self.client_key_order.push(key.id.clone());
                self.client_by_prefix
                    .entry(key.prefix.clone())
                    .or_default()
                    .push(key.id.clone());
            }
            KeyRole::Session => {
                self.session_keys
                    .entry(SessionId::from_shared(key.name.clone()))
                    .or_default()
                    .push(key.id.clone());
            }
            KeyRole::Admin => self.admin_keys.push(key.id.clone()),
        }
        self.keys.insert(key.id.clone(), Box::new(key));
    }

    /// Forgets a revoked key everywhere.
    pub fn remove_key(&mut self, id: &str) -> Option<Key> {
        let key = *self.keys.remove(id)?;
        match key.role {
            KeyRole::Client => {
                // `client_key_order` stays append-only: list cursors are
                // positions in it; listings skip revoked ids.
                if let Some(v) = self.client_by_prefix.get_mut(&key.prefix) {
                    v.retain(|k| &**k != id);
                    if v.is_empty() {
                        self.client_by_prefix.remove(&key.prefix);
                    }
                }
            }
            KeyRole::Session => {
                if let Some(v) = self.session_keys.get_mut(&*key.name) {
                    v.retain(|k| &**k != id);
                    if v.is_empty() {
                        self.session_keys.remove(&*key.name);
                    }
                }
            }
            KeyRole::Admin => self.admin_keys.retain(|k| &**k != id),
        }
        Some(key)
    }

    pub fn insert_session(&mut self, s: Session) {
        self.sessions.insert(s.id.clone(), Box::new(s));
    }

    /// Takes a session out with its session keys and driver registrations
    /// (it stays in the store); returns it and how many drivers it had.
    pub fn remove_session(&mut self, id: &str) -> Option<(Box<Session>, usize)> {
        let session = self.sessions.remove(id)?;
        for key in self.session_keys.remove(id).unwrap_or_default() {
            self.keys.remove(&key);
        }
        let drivers = self.drivers.remove(id).map_or(0, |d| d.len());
        Some((session, drivers))
    }

    /// The candidate keys of a scope for `token` (borrowed: authentication
    /// allocates nothing on the hot path).
    pub fn candidates(&self, scope: KeyScope<'_>, token: &str) -> &[KeyId] {
        match scope {
            KeyScope::Client => self.client_candidates(token),
            KeyScope::Session(id) => self.session_candidates(id),
            KeyScope::Admin => &self.admin_keys,
        }
    }

    /// Candidate client keys for `token`: selected by display prefix.
    pub fn client_candidates(&self, token: &str) -> &[KeyId] {
        if !token.starts_with("bae_") || token.starts_with("bae_ses_") {
            return &[];
        }
        let end = token.char_indices().nth(8).map_or(token.len(), |(i, _)| i);
        self.client_by_prefix
            .get(token.get(..end).unwrap_or(token))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Candidate session keys: those bound to `session_id`.
    pub fn session_candidates(&self, session_id: &str) -> &[KeyId] {
        self.session_keys
            .get(session_id)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The key among `candidates` whose SHA-256 digest matches `token`.
    pub fn match_digest(&self, candidates: &[KeyId], token: &str) -> Option<&Key> {
        let d = auth::digest(token);
        candidates
            .iter()
            .filter_map(|id| self.keys.get(id))
            .find(|k| k.matches(&d))
            .map(|k| &**k)
    }

    /// The key of `scope` that `token` authenticates as, if any, and the
    /// write to emit when that took upgrading its digest. SHA-256 rows are
    /// compared in constant time; a matching legacy Argon2id row is
    /// verified once and its digest replaced by SHA-256.
    pub fn authenticate(
        &mut self,
        scope: KeyScope<'_>,
        token: &str,
        now: MonoMs,
    ) -> Option<(Key, Option<StoreWrite>)> {
        let candidates = self.candidates(scope, token);
        if let Some(k) = self.match_digest(candidates, token) {
            return Some((k.clone(), None));
        }
        let legacy = self.legacy_candidates(candidates, token);
        let upgraded = self.legacy.verify(&legacy, token, now)?;
        let key = self.keys.get_mut(upgraded.key_id.as_str())?;
        key.hash = StoredHash::Sha256(upgraded.digest);
        Some(((**key).clone(), Some(upgraded.write())))
    }

    /// Legacy Argon2id rows among `candidates` that `token` could belong to
    /// (the row's display prefix is a prefix of the token).
    pub fn legacy_candidates(&self, candidates: &[KeyId], token: &str) -> Vec<(String, Box<str>)> {
        candidates
            .iter()
            .filter_map(|id| self.keys.get(id))
            .filter_map(|k| match &k.hash {
                StoredHash::Argon2(phc) if token.starts_with(&*k.prefix) => {
                    Some((k.id.to_string(), phc.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

/// Steps 6–8 of create (and 9 of join): reserved names, the allowlist, and
/// subagent declarations.
pub fn check_declarations(
    profile: &Profile,
    tools: &[proto::wire::ClientToolDef],
    sandbox_tools: &[proto::wire::ClientToolDef],
    subagent_tools: &[proto::wire::SubagentToolDef],
) -> Result<(), (ProblemType, String)> {
    let as_pair = |p: proto::wire::Problem| {
        let kind = p.kind().unwrap_or(ProblemType::BadRequest);
        (kind, p.detail)
    };
    proto::wire::session::check_reserved_names(tools, sandbox_tools).map_err(as_pair)?;
    if let Some(name) = tools
        .iter()
        .map(|t| t.name.as_str())
        .find(|n| !profile.allows_tool(n))
    {
        return Err((
            ProblemType::ToolNotAllowed,
            proto::wire::session::tool_not_allowed_detail(name),
        ));
    }
    proto::wire::session::validate_subagent_tools(subagent_tools).map_err(as_pair)
}

/// Writes one client's declarations into the session's per-client maps.
pub fn set_declarations(
    session: &mut Session,
    pool: &mut DeclPool,
    key_id: &str,
    tools: &[proto::wire::ClientToolDef],
    sandbox_tools: &[proto::wire::ClientToolDef],
    subagent_tools: &[proto::wire::SubagentToolDef],
) {
    let stored = |ts: &[proto::wire::ClientToolDef]| -> Vec<Value> {
        ts.iter().map(|t| t.to_value()).collect()
    };
    session.client_tools.set(pool, key_id, &stored(tools));
    session
        .sandbox_tools
        .set(pool, key_id, &stored(sandbox_tools));
    let subs: Vec<Value> = subagent_tools
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    session.subagent_tools.set(pool, key_id, &subs);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every open session holds one `Session` and one session `Key`: a
    /// regression guard on their size (issue 15's memory per session).
    #[test]
    fn catalogue_records_stay_small() {
        eprintln!(
            "Session {} B, Key {} B, Stamp {} B, ToolMap {} B",
            std::mem::size_of::<Session>(),
            std::mem::size_of::<Key>(),
            std::mem::size_of::<Stamp>(),
            std::mem::size_of::<ToolMap>()
        );
        assert!(std::mem::size_of::<Session>() <= 192);
        assert!(std::mem::size_of::<Key>() <= 176);
    }
}
