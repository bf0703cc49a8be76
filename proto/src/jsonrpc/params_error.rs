//! Why a method's params do not parse ([`ParamsError`]), rendered to its
//! `-32602` message in one place.

use std::fmt;

use super::{invalid_params, RpcError};

/// A params parse error. `Display` is the whole wire message,
/// `Invalid params: <detail>`; the details are the spec's (01 §6, 06 §3.2,
/// §5.7, §6.6) or serde's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsError {
    /// serde's message (a missing field, a member of the wrong type).
    Serde(String),
    /// A required member absent, `null`, or unusable: `missing "<name>"`.
    Missing(&'static str),
    /// `idempotency_key` not a string of 1 to 255 characters.
    IdempotencyKey,
    /// `extensions` not an array of strings.
    Extensions,
    /// `since_event_id` neither a string nor `null`.
    SinceEventId,
    /// A client tool with a blank `name`.
    BlankToolName,
    /// `state` of a local sandbox report.
    SandboxState,
    /// `unsandboxed` not a boolean.
    Unsandboxed,
    /// An `image` on an unsandboxed report.
    ImageWhenUnsandboxed,
    /// `"<name>" must be a string or null`.
    StringOrNull(&'static str),
    /// `state` of a local subagent report.
    SubagentState,
    /// `subagent_id`, `harness` or `model` not a non-blank string.
    SubagentNames,
    /// `exit_code` neither an integer nor `null`.
    ExitCode,
}

/// The part after `Invalid params: `.
struct Detail<'a>(&'a ParamsError);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            ParamsError::Serde(m) => m,
            ParamsError::Missing(name) => return write!(f, "missing \"{name}\""),
            ParamsError::StringOrNull(name) => {
                return write!(f, "\"{name}\" must be a string or null")
            }
            ParamsError::IdempotencyKey => {
                "\"idempotency_key\" must be a non-empty string of at most 255 characters"
            }
            ParamsError::Extensions => "\"extensions\" must be an array of strings",
            ParamsError::SinceEventId => "since_event_id must be a string",
            ParamsError::BlankToolName => "every tool requires a non-empty \"name\"",
            ParamsError::SandboxState => "\"state\" must be \"running\", \"stopped\", or \"error\"",
            ParamsError::Unsandboxed => "\"unsandboxed\" must be a boolean",
            ParamsError::ImageWhenUnsandboxed => {
                "\"image\" must be null when \"unsandboxed\" is true"
            }
            ParamsError::SubagentState => {
                "\"state\" must be \"start\", \"running\", \"completed\", \"failed\", or \"cancelled\""
            }
            ParamsError::SubagentNames => {
                "\"subagent_id\", \"harness\", and \"model\" must be non-empty strings"
            }
            ParamsError::ExitCode => "\"exit_code\" must be an integer",
        })
    }
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&invalid_params(Detail(self)).1)
    }
}

impl std::error::Error for ParamsError {}

impl From<ParamsError> for RpcError {
    fn from(e: ParamsError) -> Self {
        RpcError::invalid_params(Detail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error's `-32602` message, byte for byte (the black-box tests
    /// compare them).
    #[test]
    fn each_params_error_renders_its_wire_text() {
        let texts = [
            (
                ParamsError::Serde("missing field `content`".into()),
                "Invalid params: missing field `content`",
            ),
            (ParamsError::Missing("message"), "Invalid params: missing \"message\""),
            (
                ParamsError::IdempotencyKey,
                "Invalid params: \"idempotency_key\" must be a non-empty string of at most 255 characters",
            ),
            (
                ParamsError::Extensions,
                "Invalid params: \"extensions\" must be an array of strings",
            ),
            (
                ParamsError::SinceEventId,
                "Invalid params: since_event_id must be a string",
            ),
            (
                ParamsError::BlankToolName,
                "Invalid params: every tool requires a non-empty \"name\"",
            ),
            (
                ParamsError::SandboxState,
                "Invalid params: \"state\" must be \"running\", \"stopped\", or \"error\"",
            ),
            (
                ParamsError::Unsandboxed,
                "Invalid params: \"unsandboxed\" must be a boolean",
            ),
            (
                ParamsError::ImageWhenUnsandboxed,
                "Invalid params: \"image\" must be null when \"unsandboxed\" is true",
            ),
            (
                ParamsError::StringOrNull("reason"),
                "Invalid params: \"reason\" must be a string or null",
            ),
            (
                ParamsError::SubagentState,
                "Invalid params: \"state\" must be \"start\", \"running\", \"completed\", \"failed\", or \"cancelled\"",
            ),
            (
                ParamsError::SubagentNames,
                "Invalid params: \"subagent_id\", \"harness\", and \"model\" must be non-empty strings",
            ),
            (
                ParamsError::ExitCode,
                "Invalid params: \"exit_code\" must be an integer",
            ),
        ];
        for (e, text) in texts {
            assert_eq!(e.to_string(), text);
            let rpc = RpcError::from(e);
            assert_eq!((rpc.code, rpc.message.as_str()), (-32602, text));
        }
    }
}
