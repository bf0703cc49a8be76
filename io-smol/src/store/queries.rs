//! Every SQL statement of the SQLite store, cached per connection by its
//! [`Q`] (`StoreConn::stmt`).

/// The cached statements, indexed by [`Q`].
macro_rules! queries {
    ($($name:ident = $sql:expr;)*) => {
        #[derive(Debug, Clone, Copy)]
        #[allow(clippy::upper_case_acronyms)]
        pub(super) enum Q { $($name),* }
        impl Q {
            pub(super) const ALL: &'static [Q] = &[$(Q::$name),*];
            pub(super) const COUNT: usize = Q::ALL.len();
            pub(super) fn sql(self) -> &'static str {
                match self { $(Q::$name => $sql),* }
            }
        }
    };
}

queries! {
    Begin = "BEGIN IMMEDIATE";
    BeginRead = "BEGIN DEFERRED";
    Commit = "COMMIT";
    Rollback = "ROLLBACK";
    InsertProfile = "INSERT INTO profiles (id, name, provider_config, fallback_configs, \
        mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
    UpdateProfile = "UPDATE profiles SET name = ?2, provider_config = ?3, fallback_configs = ?4, \
        mcp_servers = ?5, allowed_tools = ?6, available_sandboxes = ?7, created_at = ?8, \
        updated_at = ?9, deleted_at = ?10 WHERE id = ?1";
    InsertKey = "INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
    RevokeKey = "UPDATE keys SET deleted_at = ?2 WHERE id = ?1";
    RevokeSessionKeysOf = "UPDATE keys SET deleted_at = ?2 WHERE role = 'session' \
        AND client_id = ?1 AND deleted_at IS NULL";
    SetKeyHash = "UPDATE keys SET key_hash = ?2 WHERE id = ?1";
    TouchKey = "UPDATE keys SET last_used_at = ?2 WHERE id = ?1";
    InsertSession = "INSERT INTO sessions (id, client_key_id, profile_id, state, client_version, \
        client_tools, created_at, closed_at, sandbox_tools, subagent_tools, compaction) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
    SetSessionState = "UPDATE sessions SET state = ?2, closed_at = ?3 WHERE id = ?1";
    SetSessionTools = "UPDATE sessions SET client_tools = ?2, sandbox_tools = ?3, \
        subagent_tools = ?4 WHERE id = ?1";
    InsertEvent = "INSERT INTO session_events (rowid, id, session_id, client_key_id, event_type, \
        payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    SelectEvents = "SELECT rowid, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3";
    SelectEventSeq = "SELECT rowid FROM session_events WHERE id = ?1 AND session_id = ?2";
    LatestOfType = "SELECT rowid, id, session_id, client_key_id, event_type, payload, \
        created_at FROM session_events WHERE session_id = ?1 AND event_type = ?2 AND rowid <= ?3 \
        ORDER BY rowid DESC LIMIT ?4";
    SelectEventById = "SELECT rowid, id, session_id, client_key_id, event_type, payload, \
        created_at FROM session_events WHERE id = ?1 AND session_id = ?2";
    OfTypeFrom = "SELECT rowid, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = ?1 AND event_type = ?2 AND rowid >= ?3 \
        ORDER BY rowid";
    AllProfiles = "SELECT id, name, provider_config, fallback_configs, mcp_servers, allowed_tools, \
        available_sandboxes, created_at, updated_at, deleted_at FROM profiles ORDER BY rowid";
    ActiveKeys = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, \
        last_used_at, deleted_at FROM keys WHERE deleted_at IS NULL ORDER BY rowid";
    AllSessions = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at FROM sessions ORDER BY rowid";
    MaxSeq = "SELECT COALESCE(MAX(rowid), 0) FROM session_events";
    // Registrations a fork or an import copied (up to its lineage row's
    // `copied_through`) are its parent's, not its own (issue 38).
    Drivers = "SELECT e.session_id, e.client_key_id FROM session_events e \
        JOIN sessions s ON s.id = e.session_id \
        LEFT JOIN bae_session_lineage l ON l.session_id = e.session_id \
        WHERE s.state = 'open' AND e.event_type = 'session.driver.register' \
        AND e.client_key_id IS NOT NULL AND e.rowid > COALESCE(l.copied_through, 0) \
        ORDER BY e.rowid";
    Activity = "SELECT \
        (SELECT COUNT(*) FROM profiles WHERE deleted_at IS NULL), \
        (SELECT COUNT(*) FROM keys WHERE role = 'client' AND deleted_at IS NULL), \
        (SELECT COUNT(*) FROM sessions WHERE state = 'open'), \
        (SELECT COUNT(*) FROM sessions), \
        (SELECT COUNT(*) FROM session_events)";
    EventCount = "SELECT COUNT(*) FROM session_events";
    SessionCounts = "SELECT COUNT(*), COALESCE(SUM(state = 'open'), 0) FROM sessions";
    OpenRegistrations = "SELECT COUNT(*) FROM (SELECT DISTINCT e.session_id, e.client_key_id \
        FROM session_events e JOIN sessions s ON s.id = e.session_id \
        LEFT JOIN bae_session_lineage l ON l.session_id = e.session_id \
        WHERE s.state = 'open' AND e.event_type = 'session.driver.register' \
        AND e.client_key_id IS NOT NULL AND e.rowid > COALESCE(l.copied_through, 0))";
    ActiveUserKeys = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at FROM keys WHERE deleted_at IS NULL \
        AND role <> 'session' ORDER BY rowid";
    SessionById = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at FROM sessions \
        WHERE id = ?1";
    KeysOfSession = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at FROM keys WHERE role = 'session' AND name = ?1 \
        AND deleted_at IS NULL ORDER BY rowid";
    DriversOfSession = "SELECT client_key_id FROM session_events WHERE session_id = ?1 \
        AND event_type = 'session.driver.register' AND rowid >= ?2 \
        AND rowid > COALESCE((SELECT copied_through FROM bae_session_lineage \
        WHERE session_id = ?1), 0) AND client_key_id IS NOT NULL ORDER BY rowid";
    SessionsOfClient = "SELECT id FROM sessions WHERE id IN (SELECT name FROM keys \
        WHERE role = 'session' AND client_id = ?1 AND deleted_at IS NULL) ORDER BY rowid";
    SessionList = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at, rowid FROM sessions \
        WHERE rowid > ?1 AND (?2 IS NULL OR state = ?2) ORDER BY rowid LIMIT ?3";
    SelectEventAt = "SELECT rowid, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE rowid = ?1 AND session_id = ?2";
    PutIdempotency = "INSERT OR REPLACE INTO bae_idempotency_keys (session_id, client_key_id, \
        key, digest, created_ms, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    ExpireIdempotency = "DELETE FROM bae_idempotency_keys WHERE created_ms < ?1";
    AllIdempotency = "SELECT session_id, client_key_id, key, digest, created_ms, outcome \
        FROM bae_idempotency_keys";
    InsertChunk = "INSERT INTO bae_history_chunks (session_id, ord, body) VALUES (?1, ?2, ?3)";
    SelectChunks = "SELECT ord, body FROM bae_history_chunks \
        WHERE session_id = ?1 AND ord >= ?2 AND ord < ?3 ORDER BY ord";
    LastChunkOrd = "SELECT ord FROM bae_history_chunks WHERE session_id = ?1 \
        ORDER BY ord DESC LIMIT 1";
    InsertLineage = "INSERT INTO bae_session_lineage (session_id, kind, parent_id, \
        parent_event_id, source_session_id, created_at, copied_through) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    LineageOf = "SELECT session_id, kind, parent_id, parent_event_id, source_session_id, \
        created_at, COALESCE(copied_through, 0) FROM bae_session_lineage WHERE session_id = ?1";
    LineageChildren = "SELECT session_id, kind, parent_id, parent_event_id, \
        source_session_id, created_at, COALESCE(copied_through, 0) FROM bae_session_lineage \
        WHERE parent_id = ?1 ORDER BY rowid";
    InsertUsage = "INSERT OR IGNORE INTO bae_usage (event_seq, session_id, turn_seq, \
        client_key_id, profile_id, provider, model, compaction, created_ms, input_tokens, \
        output_tokens, cache_write_tokens, cache_read_tokens, turn_event_id) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
    UsageSessionTurns = "SELECT provider, turn_seq, count(*), sum(input_tokens), sum(output_tokens), sum(cache_write_tokens), sum(cache_read_tokens), min(turn_event_id) \
        FROM bae_usage WHERE session_id = ?1 AND created_ms >= ?2 AND created_ms < ?3 \
        GROUP BY turn_seq, provider ORDER BY turn_seq, provider";
    UsageSession = "SELECT provider, 0, count(*), sum(input_tokens), sum(output_tokens), sum(cache_write_tokens), sum(cache_read_tokens) FROM bae_usage \
        WHERE session_id = ?1 AND created_ms >= ?2 AND created_ms < ?3 \
        GROUP BY provider ORDER BY provider";
    UsageKey = "SELECT provider, 0, count(*), sum(input_tokens), sum(output_tokens), sum(cache_write_tokens), sum(cache_read_tokens) FROM bae_usage \
        WHERE client_key_id = ?1 AND created_ms >= ?2 AND created_ms < ?3 \
        GROUP BY provider ORDER BY provider";
    UsageProfile = "SELECT provider, 0, count(*), sum(input_tokens), sum(output_tokens), sum(cache_write_tokens), sum(cache_read_tokens) FROM bae_usage \
        WHERE profile_id = ?1 AND created_ms >= ?2 AND created_ms < ?3 \
        GROUP BY provider ORDER BY provider";
    PutQuota = "INSERT OR REPLACE INTO bae_quotas (scope, id, quota, updated_at) \
        VALUES (?1, ?2, ?3, ?4)";
    DeleteQuota = "DELETE FROM bae_quotas WHERE scope = ?1 AND id = ?2";
    AllQuotas = "SELECT scope, id, quota, updated_at FROM bae_quotas ORDER BY scope, id";
    OpenByCreator = "SELECT client_key_id, profile_id, COUNT(*) FROM sessions \
        WHERE state = 'open' GROUP BY client_key_id, profile_id ORDER BY client_key_id, profile_id";
}
