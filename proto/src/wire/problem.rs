//! RFC 7807 error bodies and the error-type catalogue (spec 01 §3.1–3.2,
//! spec 03 §3.1).
//!
//! Every non-2xx REST response carries exactly
//! `{"type","title","status","detail"}`; `type` is a short slug, `title` is
//! fixed per status.

use serde::{Deserialize, Serialize};

/// The `type` slugs the server emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemType {
    /// 400 `bad_request`
    BadRequest,
    /// 401 `unauthorized`
    Unauthorized,
    /// 403 `tool_not_allowed`
    ToolNotAllowed,
    /// 403 `profile_mismatch`
    ProfileMismatch,
    /// 403 `fork_not_allowed` (extension: a fork by a key other than the
    /// session's creator)
    ForkNotAllowed,
    /// 404 `not_found`
    NotFound,
    /// 405 `method_not_allowed` (HTTP layer: known path, wrong method)
    MethodNotAllowed,
    /// 408 `request_timeout` (HTTP layer: request head/body not received in time)
    RequestTimeout,
    /// 409 `session_closed`
    SessionClosed,
    /// 409 `duplicate_name` (admin)
    DuplicateName,
    /// 409 `profile_in_use` (admin)
    ProfileInUse,
    /// 409 `fork_point_incomplete` (extension: a fork point inside a
    /// running or paused turn, or inside a compaction's commit)
    ForkPointIncomplete,
    /// 409 `session_exists` (extension: an import keeping an id in use)
    SessionExists,
    /// 411 `length_required` (HTTP layer: body without a length)
    LengthRequired,
    /// 413 `payload_too_large` (HTTP layer: body over the configured limit)
    PayloadTooLarge,
    /// 422 `profile_unavailable`
    ProfileUnavailable,
    /// 422 `primary_provider_unavailable`
    PrimaryProviderUnavailable,
    /// 422 `reserved_tool_name`
    ReservedToolName,
    /// 422 `invalid_subagent_tools`
    InvalidSubagentTools,
    /// 422 `invalid_document` (extension: an import document that is
    /// truncated, malformed or breaks the event log's rules)
    InvalidDocument,
    /// 422 `unsupported_format_version` (extension: an import document of
    /// a format version this server cannot read)
    UnsupportedFormatVersion,
    /// 431 `request_header_fields_too_large` (HTTP layer)
    HeaderFieldsTooLarge,
    /// 500 `internal`
    Internal,
    /// 501 `not_implemented` (HTTP layer: unsupported transfer coding etc.)
    NotImplemented,
    /// 505 `http_version_not_supported` (HTTP layer)
    HttpVersionNotSupported,
}

impl ProblemType {
    /// Every problem type.
    pub const ALL: [ProblemType; 25] = [
        ProblemType::BadRequest,
        ProblemType::Unauthorized,
        ProblemType::ToolNotAllowed,
        ProblemType::ProfileMismatch,
        ProblemType::ForkNotAllowed,
        ProblemType::NotFound,
        ProblemType::MethodNotAllowed,
        ProblemType::RequestTimeout,
        ProblemType::SessionClosed,
        ProblemType::DuplicateName,
        ProblemType::ProfileInUse,
        ProblemType::ForkPointIncomplete,
        ProblemType::SessionExists,
        ProblemType::LengthRequired,
        ProblemType::PayloadTooLarge,
        ProblemType::ProfileUnavailable,
        ProblemType::PrimaryProviderUnavailable,
        ProblemType::ReservedToolName,
        ProblemType::InvalidSubagentTools,
        ProblemType::InvalidDocument,
        ProblemType::UnsupportedFormatVersion,
        ProblemType::HeaderFieldsTooLarge,
        ProblemType::Internal,
        ProblemType::NotImplemented,
        ProblemType::HttpVersionNotSupported,
    ];

    /// The wire `type` slug.
    pub const fn slug(self) -> &'static str {
        match self {
            ProblemType::BadRequest => "bad_request",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::ToolNotAllowed => "tool_not_allowed",
            ProblemType::ProfileMismatch => "profile_mismatch",
            ProblemType::ForkNotAllowed => "fork_not_allowed",
            ProblemType::NotFound => "not_found",
            ProblemType::MethodNotAllowed => "method_not_allowed",
            ProblemType::RequestTimeout => "request_timeout",
            ProblemType::SessionClosed => "session_closed",
            ProblemType::DuplicateName => "duplicate_name",
            ProblemType::ProfileInUse => "profile_in_use",
            ProblemType::ForkPointIncomplete => "fork_point_incomplete",
            ProblemType::SessionExists => "session_exists",
            ProblemType::LengthRequired => "length_required",
            ProblemType::PayloadTooLarge => "payload_too_large",
            ProblemType::ProfileUnavailable => "profile_unavailable",
            ProblemType::PrimaryProviderUnavailable => "primary_provider_unavailable",
            ProblemType::ReservedToolName => "reserved_tool_name",
            ProblemType::InvalidSubagentTools => "invalid_subagent_tools",
            ProblemType::InvalidDocument => "invalid_document",
            ProblemType::UnsupportedFormatVersion => "unsupported_format_version",
            ProblemType::HeaderFieldsTooLarge => "request_header_fields_too_large",
            ProblemType::Internal => "internal",
            ProblemType::NotImplemented => "not_implemented",
            ProblemType::HttpVersionNotSupported => "http_version_not_supported",
        }
    }

    /// The HTTP status.
    pub const fn status(self) -> u16 {
        match self {
            ProblemType::BadRequest => 400,
            ProblemType::Unauthorized => 401,
            ProblemType::ToolNotAllowed
            | ProblemType::ProfileMismatch
            | ProblemType::ForkNotAllowed => 403,
            ProblemType::NotFound => 404,
            ProblemType::MethodNotAllowed => 405,
            ProblemType::RequestTimeout => 408,
            ProblemType::SessionClosed
            | ProblemType::DuplicateName
            | ProblemType::ProfileInUse
            | ProblemType::ForkPointIncomplete
            | ProblemType::SessionExists => 409,
            ProblemType::LengthRequired => 411,
            ProblemType::PayloadTooLarge => 413,
            ProblemType::ProfileUnavailable
            | ProblemType::PrimaryProviderUnavailable
            | ProblemType::ReservedToolName
            | ProblemType::InvalidSubagentTools
            | ProblemType::InvalidDocument
            | ProblemType::UnsupportedFormatVersion => 422,
            ProblemType::HeaderFieldsTooLarge => 431,
            ProblemType::Internal => 500,
            ProblemType::NotImplemented => 501,
            ProblemType::HttpVersionNotSupported => 505,
        }
    }

    /// The fixed `title` for this type's status.
    pub const fn title(self) -> &'static str {
        title_for_status(self.status())
    }

    /// Look a slug up.
    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.slug() == slug)
    }
}

/// The fixed RFC 7807 `title` for an HTTP status (its reason phrase).
pub const fn title_for_status(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// An RFC 7807 problem body. Serializes to exactly
/// `{"type","title","status","detail"}` in that order (C-014).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The slug (`type` on the wire).
    #[serde(rename = "type")]
    pub type_: String,
    /// Fixed per status.
    pub title: String,
    /// The HTTP status, repeated.
    pub status: u16,
    /// Human-readable detail.
    pub detail: String,
}

/// Generic detail for `500 internal` (never an internal message).
pub const INTERNAL_DETAIL: &str = "internal server error";

impl Problem {
    /// A problem of the given type with `detail`.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Problem {
            type_: kind.slug().to_owned(),
            title: kind.title().to_owned(),
            status: kind.status(),
            detail: detail.into(),
        }
    }

    /// `400 bad_request`.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(ProblemType::BadRequest, detail)
    }

    /// `401 unauthorized`.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(ProblemType::Unauthorized, detail)
    }

    /// `404 not_found`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ProblemType::NotFound, detail)
    }

    /// `500 internal` with the generic detail.
    pub fn internal() -> Self {
        Self::new(ProblemType::Internal, INTERNAL_DETAIL)
    }

    /// The problem type, when the slug is a known one.
    pub fn kind(&self) -> Option<ProblemType> {
        ProblemType::from_slug(&self.type_)
    }

    /// The JSON body (compact, member order `type,title,status,detail`).
    pub fn to_json(&self) -> Vec<u8> {
        self.to_json_string().into_bytes()
    }

    /// The JSON body as a `String`.
    pub fn to_json_string(&self) -> String {
        let mut out = String::with_capacity(64 + self.detail.len());
        out.push_str("{\"type\":");
        super::json::push_str(&mut out, &self.type_);
        out.push_str(",\"title\":");
        super::json::push_str(&mut out, &self.title);
        out.push_str(",\"status\":");
        out.push_str(&self.status.to_string());
        out.push_str(",\"detail\":");
        super::json::push_str(&mut out, &self.detail);
        out.push('}');
        out
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.type_, self.detail)
    }
}

impl std::error::Error for Problem {}
