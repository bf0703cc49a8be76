//! Decoding rows and encoding values between SQLite and the store types.

use super::*;

pub(super) fn seq_to_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("event seq {seq} out of range")))
}

/// Compact JSON text of a value.
pub(super) fn json_text(v: &Value) -> String {
    serde_json::to_string(v).expect("serde_json::Value always serializes")
}

pub(super) fn read_event(st: &Statement<'_>) -> Result<EventRow> {
    Ok(EventRow {
        seq: st.read::<i64, _>(0)? as u64,
        id: st.read::<String, _>(1)?,
        session_id: st.read::<String, _>(2)?,
        client_key_id: st.read::<Option<String>, _>(3)?,
        event_type: st.read::<String, _>(4)?,
        payload: st.read::<String, _>(5)?,
        created_at: st.read::<String, _>(6)?,
    })
}

/// Parses a JSON column; unparsable text is kept as a JSON string so that a
/// legacy or hand-edited value never prevents the server from starting.
pub(super) fn json_column(raw: Option<String>) -> Option<Value> {
    raw.map(|s| serde_json::from_str(&s).unwrap_or(Value::String(s)))
}

pub(super) fn string_list(raw: Option<String>) -> Vec<String> {
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

pub(super) fn read_profile(st: &Statement<'_>) -> Result<ProfileRow> {
    let primary = match json_column(st.read::<Option<String>, _>(2)?) {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let allowed_tools = match json_column(st.read::<Option<String>, _>(5)?) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    Ok(ProfileRow {
        id: st.read::<String, _>(0)?,
        name: st.read::<String, _>(1)?,
        primary_provider: primary,
        fallback_providers: string_list(st.read::<Option<String>, _>(3)?),
        mcp_servers: string_list(st.read::<Option<String>, _>(4)?),
        allowed_tools,
        available_sandboxes: string_list(st.read::<Option<String>, _>(6)?),
        created_at: st.read::<String, _>(7)?,
        updated_at: st.read::<String, _>(8)?,
        deleted_at: st.read::<Option<String>, _>(9)?,
    })
}

pub(super) fn read_key(st: &Statement<'_>) -> Result<KeyRow> {
    let role_text = st.read::<String, _>(4)?;
    let role = KeyRole::parse(&role_text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown key role \"{role_text}\"")))?;
    Ok(KeyRow {
        id: st.read::<String, _>(0)?,
        name: st.read::<String, _>(1)?,
        key_hash: st.read::<String, _>(2)?,
        key_prefix: st.read::<String, _>(3)?,
        role,
        profile_id: st.read::<Option<String>, _>(5)?,
        client_id: st.read::<Option<String>, _>(6)?,
        created_at: st.read::<String, _>(7)?,
        last_used_at: st.read::<Option<String>, _>(8)?,
        deleted_at: st.read::<Option<String>, _>(9)?,
    })
}

pub(super) fn tool_map(raw: Option<String>) -> Value {
    match json_column(raw) {
        Some(Value::Null) | None => Value::Object(Default::default()),
        Some(v) => v,
    }
}

pub(super) fn read_session(st: &Statement<'_>) -> Result<SessionRow> {
    let state_text = st.read::<String, _>(3)?;
    let state = SessionState::parse(&state_text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown session state \"{state_text}\"")))?;
    let compaction = match json_column(st.read::<Option<String>, _>(8)?) {
        Some(Value::Null) | None => None,
        Some(v) => Some(v),
    };
    Ok(SessionRow {
        id: st.read::<String, _>(0)?,
        client_key_id: st.read::<String, _>(1)?,
        profile_id: st.read::<String, _>(2)?,
        state,
        client_version: st.read::<Option<String>, _>(4)?,
        client_tools: tool_map(st.read::<Option<String>, _>(5)?),
        sandbox_tools: tool_map(st.read::<Option<String>, _>(6)?),
        subagent_tools: tool_map(st.read::<Option<String>, _>(7)?),
        compaction,
        created_at: st.read::<String, _>(9)?,
        closed_at: st.read::<Option<String>, _>(10)?,
    })
}
