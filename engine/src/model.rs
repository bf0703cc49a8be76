//! In-memory catalogue of profiles, keys and sessions: what hot paths need
//! without a store round trip. Events are never held here (they are read
//! from the store on demand).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use proto::wire::CompactionConfig;

use crate::auth;
use crate::store::{KeyRole, KeyRow, ProfileRow, SessionRow, SessionState, Snapshot};

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
    pub id: String,
    pub name: String,
    pub hash: StoredHash,
    pub prefix: String,
    pub role: KeyRole,
    pub profile_id: Option<String>,
    pub client_id: Option<String>,
    pub created_at: String,
    pub last_used_at: Option<String>,
}

impl Key {
    pub fn from_row(row: &KeyRow) -> Self {
        let hash = match auth::parse_digest(&row.key_hash) {
            Some(d) => StoredHash::Sha256(d),
            None if row.key_hash.starts_with("$argon2id$") => {
                StoredHash::Argon2(row.key_hash.clone().into())
            }
            None => StoredHash::Other,
        };
        Key {
            id: row.id.clone(),
            name: row.name.clone(),
            hash,
            prefix: row.key_prefix.clone(),
            role: row.role,
            profile_id: row.profile_id.clone(),
            client_id: row.client_id.clone(),
            created_at: row.created_at.clone(),
            last_used_at: row.last_used_at.clone(),
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
    pub id: String,
    pub creator: String,
    pub profile_id: String,
    pub state: SessionState,
    pub client_version: Option<String>,
    /// Per-client declarations, keyed by client key id.
    pub client_tools: ToolMap,
    pub sandbox_tools: ToolMap,
    pub subagent_tools: ToolMap,
    pub compaction: CompactionConfig,
    pub created_at: String,
    pub closed_at: Option<String>,
    /// Created by this process: its history is known to be empty, so the
    /// first turn needs no store read (not persisted).
    pub fresh: bool,
}

impl Session {
    pub fn from_row(row: &SessionRow) -> Self {
        Session {
            id: row.id.clone(),
            creator: row.client_key_id.clone(),
            profile_id: row.profile_id.clone(),
            state: row.state,
            client_version: row.client_version.clone(),
            client_tools: ToolMap::from_value(&row.client_tools),
            sandbox_tools: ToolMap::from_value(&row.sandbox_tools),
            subagent_tools: ToolMap::from_value(&row.subagent_tools),
            compaction: CompactionConfig::from_stored(
                row.compaction.as_ref().map(|c| c.to_string()).as_deref(),
            ),
            created_at: row.created_at.clone(),
            closed_at: row.closed_at.clone(),
            fresh: false,
        }
    }

    pub fn to_row(&self) -> SessionRow {
        SessionRow {
            id: self.id.clone(),
            client_key_id: self.creator.clone(),
            profile_id: self.profile_id.clone(),
            state: self.state,
            client_version: self.client_version.clone(),
            client_tools: self.client_tools.to_value(),
            sandbox_tools: self.sandbox_tools.to_value(),
            subagent_tools: self.subagent_tools.to_value(),
            compaction: serde_json::from_str(&self.compaction.to_json()).ok(),
            created_at: self.created_at.clone(),
            closed_at: self.closed_at.clone(),
        }
    }
}

/// One kind of per-client tool declarations (`{"<client key id>": [tool…]}`),
/// held as its compact JSON text: a few dozen bytes per session instead of
/// a map per session, parsed only when a turn, join or update needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolMap(Box<str>);

impl Default for ToolMap {
    fn default() -> Self {
        ToolMap("{}".into())
    }
}

impl ToolMap {
    /// A legacy non-object column reads as empty; the next write replaces it.
    pub fn from_value(v: &Value) -> Self {
        match v {
            Value::Object(_) => ToolMap(v.to_string().into_boxed_str()),
            _ => ToolMap::default(),
        }
    }

    fn parse(&self) -> Map<String, Value> {
        match serde_json::from_str(&self.0) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.parse())
    }

    /// The declarations of one client (empty when it declared none).
    pub fn get(&self, key_id: &str) -> Vec<Value> {
        match self.parse().remove(key_id) {
            Some(Value::Array(tools)) => tools,
            _ => Vec::new(),
        }
    }

    /// Replaces one client's declarations; other clients' stay untouched.
    pub fn set(&mut self, key_id: &str, tools: Vec<Value>) {
        let mut m = self.parse();
        m.insert(key_id.to_string(), Value::Array(tools));
        self.0 = Value::Object(m).to_string().into_boxed_str();
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
    pub profiles: HashMap<String, Profile>,
    /// Profile ids in creation order (admin listing).
    pub profile_order: Vec<String>,
    /// Every profile name ever used, deleted ones included.
    pub profile_names: HashSet<String>,

    /// Active keys by id.
    pub keys: HashMap<String, Key>,
    /// Active client key ids in creation order (admin listing).
    pub client_key_order: Vec<String>,
    /// Active client keys by display prefix (first 8 characters).
    pub client_by_prefix: HashMap<String, Vec<String>>,
    /// Active session keys by the session they are bound to.
    pub session_keys: HashMap<String, Vec<String>>,
    /// Active admin keys.
    pub admin_keys: Vec<String>,

    pub sessions: HashMap<String, Session>,
    /// Session ids in creation order (admin listing; cursor = position).
    pub session_order: Vec<String>,
    /// Registered drivers per session (durable: rebuilt from the log).
    pub drivers: HashMap<String, BTreeSet<String>>,
}

impl Catalog {
    pub fn restore(snapshot: &Snapshot, durable_drivers: bool) -> Self {
        let mut c = Catalog::default();
        for p in &snapshot.profiles {
            c.insert_profile(p.clone());
        }
        for k in &snapshot.keys {
            if k.deleted_at.is_none() {
                c.insert_key(Key::from_row(k));
            }
        }
        for s in &snapshot.sessions {
            c.insert_session(Session::from_row(s));
        }
        for (sid, kid) in snapshot.drivers.iter().filter(|_| durable_drivers) {
            if c.sessions.get(sid).map(|s| s.state) == Some(SessionState::Open) {
                c.drivers
                    .entry(sid.clone())
                    .or_default()
                    .insert(kid.clone());
            }
        }
        c
    }

    pub fn insert_profile(&mut self, row: ProfileRow) {
        self.profile_names.insert(row.name.clone());
        self.profile_order.push(row.id.clone());
        self.profiles.insert(row.id.clone(), Profile { row });
    }

    pub fn live_profile(&self, id: &str) -> Option<&Profile> {
        self.profiles.get(id).filter(|p| p.is_live())
    }

    pub fn insert_key(&mut self, key: Key) {
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
                    .entry(key.name.clone())
                    .or_default()
                    .push(key.id.clone());
            }
            KeyRole::Admin => self.admin_keys.push(key.id.clone()),
        }
        self.keys.insert(key.id.clone(), key);
    }

    /// Forgets a revoked key everywhere.
    pub fn remove_key(&mut self, id: &str) -> Option<Key> {
        let key = self.keys.remove(id)?;
        match key.role {
            KeyRole::Client => {
                // `client_key_order` stays append-only: list cursors are
                // positions in it; listings skip revoked ids.
                if let Some(v) = self.client_by_prefix.get_mut(&key.prefix) {
                    v.retain(|k| k != id);
                    if v.is_empty() {
                        self.client_by_prefix.remove(&key.prefix);
                    }
                }
            }
            KeyRole::Session => {
                if let Some(v) = self.session_keys.get_mut(&key.name) {
                    v.retain(|k| k != id);
                }
            }
            KeyRole::Admin => self.admin_keys.retain(|k| k != id),
        }
        Some(key)
    }

    pub fn insert_session(&mut self, s: Session) {
        self.session_order.push(s.id.clone());
        self.sessions.insert(s.id.clone(), s);
    }

    /// The candidate keys of a scope for `token` (borrowed: authentication
    /// allocates nothing on the hot path).
    pub fn candidates(&self, scope: KeyScope<'_>, token: &str) -> &[String] {
        match scope {
            KeyScope::Client => self.client_candidates(token),
            KeyScope::Session(id) => self.session_candidates(id),
            KeyScope::Admin => &self.admin_keys,
        }
    }

    /// Candidate client keys for `token`: selected by display prefix.
    pub fn client_candidates(&self, token: &str) -> &[String] {
        if !token.starts_with("bae_") || token.starts_with("bae_ses_") {
            return &[];
        }
        let prefix: String = token.chars().take(8).collect();
        self.client_by_prefix
            .get(&prefix)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Candidate session keys: those bound to `session_id`.
    pub fn session_candidates(&self, session_id: &str) -> &[String] {
        self.session_keys
            .get(session_id)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The key among `candidates` whose SHA-256 digest matches `token`.
    pub fn match_digest(&self, candidates: &[String], token: &str) -> Option<&Key> {
        let d = auth::digest(token);
        candidates
            .iter()
            .filter_map(|id| self.keys.get(id))
            .find(|k| k.matches(&d))
    }

    /// Legacy Argon2id rows among `candidates` that `token` could belong to
    /// (the row's display prefix is a prefix of the token).
    pub fn legacy_candidates(&self, candidates: &[String], token: &str) -> Vec<(String, Box<str>)> {
        candidates
            .iter()
            .filter_map(|id| self.keys.get(id))
            .filter_map(|k| match &k.hash {
                StoredHash::Argon2(phc) if token.starts_with(&k.prefix) => {
                    Some((k.id.clone(), phc.clone()))
                }
                _ => None,
            })
            .collect()
    }
}
