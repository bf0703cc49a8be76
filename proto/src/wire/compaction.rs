//! Session compaction configuration (spec 07 §1).
//!
//! Wire shapes (creation only):
//! `{"mode":"auto","size":128000}`, `{"mode":"client"}`,
//! `{"mode":"client","prompt":"…"}`. Absent or `null` means client mode
//! without a prompt. Unknown members are ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Minimum `size` for `mode: "auto"`, in tokens.
pub const MIN_AUTO_SIZE: u64 = 1000;

/// The 400 detail for an auto `size` below [`MIN_AUTO_SIZE`].
pub const SIZE_TOO_SMALL_DETAIL: &str =
    "invalid compaction config: size must be at least 1000 tokens";

/// Prefix of every compaction-config 400 detail.
pub const INVALID_COMPACTION_PREFIX: &str = "invalid compaction config: ";

/// A session's compaction mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum CompactionConfig {
    /// Server compacts once a completed turn's usage exceeds `size`.
    Auto {
        /// Token threshold (strictly greater triggers).
        size: u64,
    },
    /// Harness decides (`session.compact`); optional default instruction.
    Client {
        /// Default custom instruction for `session.compact`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
    },
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig::Client { prompt: None }
    }
}

impl CompactionConfig {
    /// Parse a `compaction` member value. `null` is client mode; the error is
    /// the full 400 detail (`invalid compaction config: <serde error>`).
    pub fn from_value(v: &Value) -> Result<Self, String> {
        if v.is_null() {
            return Ok(Self::default());
        }
        serde_json::from_value::<CompactionConfig>(v.clone())
            .map_err(|e| format!("{INVALID_COMPACTION_PREFIX}{e}"))
    }

    /// The post-parse rule: auto `size` must be at least 1000 tokens.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            CompactionConfig::Auto { size } if *size < MIN_AUTO_SIZE => {
                Err(SIZE_TOO_SMALL_DETAIL.to_owned())
            }
            _ => Ok(()),
        }
    }

    /// Normalized JSON for storage (`sessions.compaction`):
    /// `{"mode":"auto","size":N}`, `{"mode":"client"}` or
    /// `{"mode":"client","prompt":"…"}`.
    pub fn to_json(&self) -> String {
        match self {
            CompactionConfig::Auto { size } => format!("{{\"mode\":\"auto\",\"size\":{size}}}"),
            CompactionConfig::Client { prompt: None } => "{\"mode\":\"client\"}".to_owned(),
            CompactionConfig::Client { prompt: Some(p) } => {
                let mut out = String::from("{\"mode\":\"client\",\"prompt\":");
                super::json::push_str(&mut out, p);
                out.push('}');
                out
            }
        }
    }

    /// Read the stored column: `NULL` (or unparsable text) reads as client
    /// mode without a prompt.
    pub fn from_stored(stored: Option<&str>) -> Self {
        stored
            .and_then(|s| serde_json::from_str::<CompactionConfig>(s).ok())
            .unwrap_or_default()
    }

    /// The auto threshold, if auto mode.
    pub fn auto_size(&self) -> Option<u64> {
        match self {
            CompactionConfig::Auto { size } => Some(*size),
            CompactionConfig::Client { .. } => None,
        }
    }

    /// The stored client-mode prompt, if any (auto mode has none).
    pub fn client_prompt(&self) -> Option<&str> {
        match self {
            CompactionConfig::Client { prompt } => prompt.as_deref(),
            CompactionConfig::Auto { .. } => None,
        }
    }
}
