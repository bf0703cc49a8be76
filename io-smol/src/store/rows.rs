//! Decoding rows and encoding values between the databases and the store
//! types: both backends select the same columns in the same order, and
//! decode them here through [`Cols`].

use super::*;

/// The columns of one result row, by position.
pub(crate) trait Cols {
    fn text(&self, i: usize) -> Result<String>;
    fn opt_text(&self, i: usize) -> Result<Option<String>>;
    fn int(&self, i: usize) -> Result<i64>;
}

impl Cols for Statement<'_> {
    /// By pointer and length, not as a C string: the binding's `String`
    /// read runs `strlen` and a lossy UTF-8 pass over every payload (a
    /// quarter of the store thread's time when paging large histories), and
    /// would cut a text at an embedded NUL.
    fn text(&self, i: usize) -> Result<String> {
        let bytes = self.read::<Vec<u8>, _>(i)?;
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        if self.column_type(i)? == sqlite::Type::Null {
            return Ok(None);
        }
        self.text(i).map(Some)
    }
    fn int(&self, i: usize) -> Result<i64> {
        Ok(self.read::<i64, _>(i)?)
    }
}

/// Column `i` of `st`'s current row as the bytes SQLite holds, borrowed
/// (`None` for NULL): what a page renderer copies once, into the page.
/// Call only while `st` is on a row and `i` is one of its columns.
pub(crate) fn column_text<'s>(st: &'s Statement<'_>, i: usize) -> Option<&'s [u8]> {
    let i = std::os::raw::c_int::try_from(i).ok()?;
    let raw = st.as_raw();
    // SAFETY: `raw` is the live statement `st` wraps. The text pointer is
    // owned by SQLite and stays valid until the statement steps, resets or
    // is finalized, or the column is read as another type; stepping and
    // resetting take `&mut Statement` and finalizing drops it, so the
    // shared borrow of `st` the slice carries rules all of them out while
    // it lives. `sqlite3_column_bytes` after `sqlite3_column_text` is the
    // byte length of that same text.
    unsafe {
        let p = sqlite::ffi::sqlite3_column_text(raw, i);
        if p.is_null() {
            return None;
        }
        let n = usize::try_from(sqlite::ffi::sqlite3_column_bytes(raw, i)).unwrap_or(0);
        Some(std::slice::from_raw_parts(p, n))
    }
}

pub(crate) fn seq_to_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("event seq {seq} out of range")))
}

/// The JSON texts of a profile's list and provider columns (both backends
/// store the same text).
pub(crate) struct ProfileTexts {
    pub primary: String,
    pub fallbacks: String,
    pub mcp: String,
    pub tools: String,
    pub sandboxes: String,
}

impl ProfileTexts {
    pub fn of(p: &ProfileRow) -> ProfileTexts {
        let list = |v: &[String]| serde_json::to_string(v).expect("strings serialize");
        ProfileTexts {
            primary: json_text(&Value::String(p.primary_provider.clone())),
            fallbacks: list(&p.fallback_providers),
            mcp: list(&p.mcp_servers),
            tools: serde_json::to_string(&p.allowed_tools).expect("values serialize"),
            sandboxes: list(&p.available_sandboxes),
        }
    }
}

/// Compact JSON text of a value.
pub(crate) fn json_text(v: &Value) -> String {
    serde_json::to_string(v).expect("serde_json::Value always serializes")
}

pub(crate) fn read_event(st: &impl Cols) -> Result<EventRow> {
    Ok(EventRow {
        seq: st.int(0)? as u64,
        id: st.text(1)?,
        session_id: st.text(2)?,
        client_key_id: st.opt_text(3)?,
        event_type: st.text(4)?,
        payload: st.text(5)?,
        created_at: st.text(6)?,
    })
}

/// Parses a JSON column; unparsable text is kept as a JSON string so that a
/// legacy or hand-edited value never prevents the server from starting.
pub(crate) fn json_column(raw: Option<String>) -> Option<Value> {
    raw.map(|s| serde_json::from_str(&s).unwrap_or(Value::String(s)))
}

pub(crate) fn string_list(raw: Option<String>) -> Vec<String> {
    match json_column(raw) {
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

pub(crate) fn read_profile(st: &impl Cols) -> Result<ProfileRow> {
    let primary = match json_column(st.opt_text(2)?) {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let allowed_tools = match json_column(st.opt_text(5)?) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    Ok(ProfileRow {
        id: st.text(0)?,
        name: st.text(1)?,
        primary_provider: primary,
        fallback_providers: string_list(st.opt_text(3)?),
        mcp_servers: string_list(st.opt_text(4)?),
        allowed_tools,
        available_sandboxes: string_list(st.opt_text(6)?),
        created_at: st.text(7)?,
        updated_at: st.text(8)?,
        deleted_at: st.opt_text(9)?,
    })
}

pub(crate) fn read_key(st: &impl Cols) -> Result<KeyRow> {
    let role_text = st.text(4)?;
    let role = KeyRole::parse(&role_text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown key role \"{role_text}\"")))?;
    Ok(KeyRow {
        id: st.text(0)?,
        name: st.text(1)?,
        key_hash: st.text(2)?,
        key_prefix: st.text(3)?,
        role,
        profile_id: st.opt_text(5)?,
        client_id: st.opt_text(6)?,
        created_at: st.text(7)?,
        last_used_at: st.opt_text(8)?,
        deleted_at: st.opt_text(9)?,
    })
}

/// A tool-map column as stored; `{}` for NULL (the engine reads any
/// other non-object text as empty).
pub(crate) fn tool_map(raw: Option<String>) -> String {
    raw.unwrap_or_else(|| "{}".to_string())
}

pub(crate) fn read_session(st: &impl Cols) -> Result<SessionRow> {
    let state_text = st.text(3)?;
    let state = SessionState::parse(&state_text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown session state \"{state_text}\"")))?;
    // `null` text reads as NULL; anything else is parsed by the engine.
    let compaction = st.opt_text(8)?.filter(|c| c != "null");
    Ok(SessionRow {
        id: st.text(0)?,
        client_key_id: st.text(1)?,
        profile_id: st.text(2)?,
        state,
        client_version: st.opt_text(4)?,
        client_tools: tool_map(st.opt_text(5)?),
        sandbox_tools: tool_map(st.opt_text(6)?),
        subagent_tools: tool_map(st.opt_text(7)?),
        compaction,
        created_at: st.text(9)?,
        closed_at: st.opt_text(10)?,
    })
}

/// A `bae_quotas` row (`scope, id, quota, updated_at`); `None` for a scope
/// this version does not know (logged, skipped).
pub(crate) fn read_quota(st: &impl Cols) -> Result<Option<engine::store::QuotaRow>> {
    let Some(scope) = engine::store::QuotaScope::from_columns(&st.text(0)?, st.text(1)?) else {
        tracing::error!("bae_quotas row of an unknown scope skipped");
        return Ok(None);
    };
    Ok(Some(engine::store::QuotaRow {
        scope,
        quota: st.text(2)?,
        updated_at: st.text(3)?,
    }))
}

/// Open sessions of one creator key and profile (`client_key_id,
/// profile_id, count`).
pub(crate) fn read_open_count(st: &impl Cols) -> Result<engine::store::OpenCount> {
    Ok(engine::store::OpenCount {
        client_key_id: st.text(0)?,
        profile_id: st.text(1)?,
        open: st.int(2)?.max(0) as u64,
    })
}
