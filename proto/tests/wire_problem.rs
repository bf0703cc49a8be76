//! RFC 7807 bodies (spec 01 §3.1–3.2, 03 §3.1; C-003, C-014).

use proto::wire::problem::*;
use serde_json::{json, Value};

#[test]
fn c014_problem_has_exactly_four_members_in_order() {
    let p = Problem::new(ProblemType::Unauthorized, "invalid or revoked client key");
    let body = p.to_json();
    assert_eq!(
        String::from_utf8(body.clone()).unwrap(),
        r#"{"type":"unauthorized","title":"Unauthorized","status":401,"detail":"invalid or revoked client key"}"#
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["type", "title", "status", "detail"]
    );
    // Fast path equals serde.
    assert_eq!(serde_json::to_vec(&p).unwrap(), body);
    let weird = Problem::bad_request("a \"quoted\"\n\u{1} detail é");
    assert_eq!(serde_json::to_vec(&weird).unwrap(), weird.to_json());
    let back: Problem = serde_json::from_slice(&weird.to_json()).unwrap();
    assert_eq!(back, weird);
}

#[test]
fn catalogue_slugs_statuses_titles() {
    let expected = [
        (ProblemType::BadRequest, "bad_request", 400, "Bad Request"),
        (
            ProblemType::Unauthorized,
            "unauthorized",
            401,
            "Unauthorized",
        ),
        (
            ProblemType::ToolNotAllowed,
            "tool_not_allowed",
            403,
            "Forbidden",
        ),
        (
            ProblemType::ProfileMismatch,
            "profile_mismatch",
            403,
            "Forbidden",
        ),
        (ProblemType::NotFound, "not_found", 404, "Not Found"),
        (
            ProblemType::SessionClosed,
            "session_closed",
            409,
            "Conflict",
        ),
        (
            ProblemType::DuplicateName,
            "duplicate_name",
            409,
            "Conflict",
        ),
        (ProblemType::ProfileInUse, "profile_in_use", 409, "Conflict"),
        (
            ProblemType::ProfileUnavailable,
            "profile_unavailable",
            422,
            "Unprocessable Entity",
        ),
        (
            ProblemType::PrimaryProviderUnavailable,
            "primary_provider_unavailable",
            422,
            "Unprocessable Entity",
        ),
        (
            ProblemType::ReservedToolName,
            "reserved_tool_name",
            422,
            "Unprocessable Entity",
        ),
        (
            ProblemType::InvalidSubagentTools,
            "invalid_subagent_tools",
            422,
            "Unprocessable Entity",
        ),
        (
            ProblemType::Internal,
            "internal",
            500,
            "Internal Server Error",
        ),
        (
            ProblemType::PayloadTooLarge,
            "payload_too_large",
            413,
            "Payload Too Large",
        ),
        (
            ProblemType::HeaderFieldsTooLarge,
            "request_header_fields_too_large",
            431,
            "Request Header Fields Too Large",
        ),
        (
            ProblemType::MethodNotAllowed,
            "method_not_allowed",
            405,
            "Method Not Allowed",
        ),
        (
            ProblemType::NotImplemented,
            "not_implemented",
            501,
            "Not Implemented",
        ),
        (
            ProblemType::HttpVersionNotSupported,
            "http_version_not_supported",
            505,
            "HTTP Version Not Supported",
        ),
    ];
    for (t, slug, status, title) in expected {
        assert_eq!((t.slug(), t.status(), t.title()), (slug, status, title));
        assert_eq!(ProblemType::from_slug(slug), Some(t));
    }
    for t in ProblemType::ALL {
        assert_eq!(ProblemType::from_slug(t.slug()), Some(t));
        assert_ne!(t.title(), "Error");
        let p = Problem::new(t, "d");
        assert_eq!(p.kind(), Some(t));
        assert_eq!(p.status, t.status());
    }
    assert_eq!(ProblemType::from_slug("nope"), None);
}

#[test]
fn c003_unauthorized_and_seed_examples() {
    let v: Value =
        serde_json::from_slice(&Problem::unauthorized("missing Authorization header").to_json())
            .unwrap();
    assert_eq!(
        v,
        json!({"type":"unauthorized","title":"Unauthorized","status":401,"detail":"missing Authorization header"})
    );
    let v: Value =
        serde_json::from_slice(&Problem::not_found("no session ses_0f").to_json()).unwrap();
    assert_eq!(
        v,
        json!({"type":"not_found","title":"Not Found","status":404,"detail":"no session ses_0f"})
    );
    let i = Problem::internal();
    assert_eq!(
        (i.status, i.type_.as_str(), i.title.as_str()),
        (500, "internal", "Internal Server Error")
    );
}
