//! The JSON-RPC front layer's own checks of a gated method's params,
//! before the request is routed to its session: plain functions from the
//! typed params to what the session core takes, or the error object to
//! answer. Each runs after the caller's driver and state checks (spec 01
//! §6: a parse error is answered only after them).

use proto::jsonrpc::codes::{self, STEER_REJECTED};
use proto::jsonrpc::{CompactParams, Parsed, RpcError, SendMessageParams};
use serde_json::Value;

use crate::session_core::{merge, SteerRefusal};

/// `session.steerTurn {"message": {"role"?: "user", "content": …}}`
/// (extension `turn.steer`, docs/extensions.md): the content to queue for
/// the running turn's next provider call (`session_core/steer.rs` says
/// where it lands).
pub(crate) fn steer_content(params: Parsed<SendMessageParams>) -> Result<Value, RpcError> {
    let message = params?;
    if message.role != "user" {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            "Invalid params: a steer's \"role\" must be \"user\"",
        ));
    }
    if merge::has_tool_result(&message.content) {
        return Err(RpcError::new(
            codes::INVALID_PARAMS,
            "Invalid params: a steer must not contain tool_result blocks",
        ));
    }
    Ok(message.content)
}

/// The session core refused a steer (or no turn is running).
pub(crate) fn steer_rejected(why: SteerRefusal) -> RpcError {
    RpcError::new(STEER_REJECTED, format!("steer_rejected: {}", why.why()))
}

/// `session.compact` (spec 07 §4.2): the call-level prompt; the request
/// then waits on the turn gate like a `sendMessage`.
pub(crate) fn compact_prompt(params: Parsed<CompactParams>) -> Result<Option<String>, RpcError> {
    params.map(|p| p.prompt).map_err(RpcError::from)
}
