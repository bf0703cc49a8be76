//! The [`World`] a session core reads while it decides: one session's view
//! of the catalogue (state, profile, tool declarations), the provider
//! registry and settings, the session's MCP routes and its sandbox
//! handle. Borrowed field by field from the engine, so the core can be
//! borrowed mutably beside it.

use std::collections::BTreeSet;

use proto::wire::content::Dispatch;
use serde_json::{json, Value};

use crate::mcp::SessionMcp;
use crate::model::Catalog;
use crate::sandbox::SessionSandbox;
use crate::session_core::{ChainError, World};
use crate::{Config, ProviderEntry};

pub(crate) struct EngineWorld<'a> {
    pub session_id: &'a str,
    pub catalog: &'a Catalog,
    pub config: &'a Config,
    /// The session's MCP connection set, when it has one.
    pub mcp: Option<&'a SessionMcp>,
    /// The session's sandbox and subagents, when it has a box.
    pub sandbox: Option<&'a SessionSandbox>,
}

impl EngineWorld<'_> {
    fn profile_id(&self) -> &str {
        (self.catalog.sessions.get(self.session_id)).map_or("", |s| &*s.profile_id)
    }
}

impl World for EngineWorld<'_> {
    fn open_error(&self) -> Option<String> {
        self.catalog.open_error(self.session_id)
    }

    fn chain(&self) -> Result<Vec<ProviderEntry>, ChainError> {
        let profile_id = self.profile_id();
        let Some(profile) = self.catalog.live_profile(profile_id) else {
            return Err(ChainError::ProfileUnavailable {
                profile_id: profile_id.to_string(),
            });
        };
        let row = &profile.row;
        let Some(primary) = self.config.provider(&row.primary_provider) else {
            return Err(ChainError::PrimaryMissing {
                name: row.primary_provider.clone(),
            });
        };
        let mut chain = vec![primary.clone()];
        for name in &row.fallback_providers {
            match self.config.provider(name) {
                Some(p) => chain.push(p.clone()),
                None => {
                    tracing::error!(provider = %name, "fallback provider is not configured; skipped")
                }
            }
        }
        Ok(chain)
    }

    fn profile_live(&self) -> bool {
        self.catalog.live_profile(self.profile_id()).is_some()
    }

    /// The acting driver's client, sandbox and subagent tools, then the
    /// session's MCP tools (spec 06 §1). An MCP tool whose name one of the
    /// driver's own tools already has is left out: that name never
    /// dispatches to MCP, and providers reject duplicate names (spec 05
    /// §10 note 2).
    fn tools(&self, key_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let Some(s) = self.catalog.sessions.get(self.session_id) else {
            return out;
        };
        let mut own: BTreeSet<String> = BTreeSet::new();
        for map in [&s.client_tools, &s.sandbox_tools, &s.subagent_tools] {
            for t in map.get(key_id) {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    own.insert(n.to_string());
                }
                out.push(json!({
                    "name": t.get("name").cloned().unwrap_or(Value::Null),
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "input_schema": t.get("input_schema").cloned().unwrap_or_else(|| json!({})),
                }));
            }
        }
        for t in self.mcp.map_or(&[][..], SessionMcp::tools) {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            if !own.contains(name) && name != proto::wire::session::REMOTE_SUBAGENT_STATUS {
                out.push(t.clone());
            }
        }
        if self.sandbox.is_some_and(SessionSandbox::tracks_subagents) {
            out.push(super::tools::status_tool());
        }
        out
    }

    /// `client` | `sandbox` | `subagent` | `mcp` (spec 06 §2).
    fn classify(&self, key_id: &str, tool: &str) -> Dispatch {
        let Some(s) = self.catalog.sessions.get(self.session_id) else {
            return Dispatch::Mcp;
        };
        let has = |map: &crate::model::ToolMap| map.declares(key_id, tool);
        if has(&s.client_tools) {
            Dispatch::Client
        } else if has(&s.sandbox_tools) {
            Dispatch::Sandbox
        } else if has(&s.subagent_tools) || tool == proto::wire::session::REMOTE_SUBAGENT_STATUS {
            Dispatch::Subagent
        } else {
            Dispatch::Mcp
        }
    }

    fn mcp_server(&self, tool: &str) -> Option<String> {
        self.mcp?.route(tool).map(str::to_string)
    }

    fn sandbox(&self) -> Option<(String, String)> {
        (self.sandbox?.handle()).map(|h| (h.image.clone(), h.container.clone()))
    }

    fn auto_compaction_size(&self) -> Option<u64> {
        (self.catalog.sessions.get(self.session_id))?
            .compaction
            .auto_size()
    }

    fn compaction_prompt(&self) -> Option<String> {
        (self.catalog.sessions.get(self.session_id))?
            .compaction
            .client_prompt()
            .map(str::to_string)
    }

    fn turn_timeout_ms(&self) -> u64 {
        self.config.turn_timeout_ms
    }

    fn max_output(&self) -> usize {
        self.config.sandbox_max_output
    }

    fn prompt_cache_key(&self) -> String {
        crate::usage::prompt_cache_key(self.session_id)
    }
}
