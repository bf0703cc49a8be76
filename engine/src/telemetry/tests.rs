use super::*;

fn drain(t: &mut Telemetry) -> Vec<Fact> {
    let mut out = Vec::new();
    t.drain_into(&mut out);
    out
}

fn opened(f: &[Fact], name: SpanName) -> Vec<(SpanKey, Parent, Vec<Link>, Vec<Attr>)> {
    f.iter()
        .filter_map(|f| match f {
            Fact::Opened {
                key,
                name: n,
                parent,
                links,
                attrs,
            } if *n == name => Some((*key, *parent, links.clone(), attrs.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn off_records_nothing() {
    let mut t = Telemetry::new(false);
    t.http_begin(
        ConnId(1),
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        None,
    );
    t.session_open("ses_1", "prof", "key");
    t.turn_begin(TurnId(1), Some(ConnId(1)), ("ses_1", "prof", "key"), false);
    t.turn_end(TurnId(1), "ses_1", TurnEnd::Paused);
    assert!(drain(&mut t).is_empty());
}

#[test]
fn healthz_has_no_span_and_traceparent_parents_the_request() {
    let mut t = Telemetry::new(true);
    t.http_begin(ConnId(1), Listener::Client, "GET", "/healthz", None);
    assert!(drain(&mut t).is_empty());
    let tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    t.http_begin(
        ConnId(2),
        Listener::Client,
        "POST",
        "/api/v1/sessions/ses_x/rpc",
        Some(tp),
    );
    t.http_begin(
        ConnId(3),
        Listener::Admin,
        "GET",
        "/admin/v1/profiles/p1",
        Some(b"junk"),
    );
    let f = drain(&mut t);
    let http = opened(&f, SpanName::HttpRequest);
    assert!(matches!(http[0].1, Parent::Remote(p) if p.parent_id[7] == 0xb7));
    assert!(http[0].3.contains(&(
        AttrKey::HttpRoute,
        AttrValue::Static("/api/v1/sessions/{session_id}/rpc")
    )));
    assert_eq!(http[1].1, Parent::Root);
    assert!(http[1].3.contains(&(
        AttrKey::HttpRoute,
        AttrValue::Static("/admin/v1/profiles/{profile_id}")
    )));
}

#[test]
fn a_resumed_turn_links_its_session_and_the_paused_turn() {
    let mut t = Telemetry::new(true);
    t.session_open("ses_1", "prof", "key");
    t.http_begin(
        ConnId(1),
        Listener::Client,
        "POST",
        "/api/v1/sessions/ses_1/rpc",
        None,
    );
    t.turn_begin(TurnId(1), Some(ConnId(1)), ("ses_1", "prof", "key"), false);
    t.dispatch_begin(TurnId(1), "toolu_1", "get_weather", Dispatch::Client, 17);
    t.turn_end(TurnId(1), "ses_1", TurnEnd::Paused);
    t.http_end(ConnId(1));
    let f = drain(&mut t);
    let session = opened(&f, SpanName::Session)[0].0;
    let req1 = opened(&f, SpanName::HttpRequest)[0].0;
    let (turn1, parent, links, _) = opened(&f, SpanName::Turn).remove(0);
    assert_eq!(parent, Parent::Span(req1));
    assert_eq!(
        links,
        vec![Link {
            to: session,
            kind: LinkKind::Session
        }]
    );
    let (_, dparent, _, _) = opened(&f, SpanName::ToolDispatch).remove(0);
    assert_eq!(dparent, Parent::Span(turn1));
    assert!(f.contains(&Fact::Annotated {
        key: turn1,
        attrs: vec![(AttrKey::TurnOutcome, AttrValue::Static("paused"))]
    }));
    assert!(f.contains(&Fact::Ended {
        key: turn1,
        status: Status::Ok,
        keep: true
    }));

    t.http_begin(
        ConnId(2),
        Listener::Client,
        "POST",
        "/api/v1/sessions/ses_1/rpc",
        None,
    );
    t.turn_begin(TurnId(2), Some(ConnId(2)), ("ses_1", "prof", "key"), true);
    t.turn_end(TurnId(2), "ses_1", TurnEnd::Completed);
    let f = drain(&mut t);
    let (_, _, links, attrs) = opened(&f, SpanName::Turn).remove(0);
    assert_eq!(
        links,
        vec![
            Link {
                to: session,
                kind: LinkKind::Session
            },
            Link {
                to: turn1,
                kind: LinkKind::Resume
            }
        ]
    );
    assert!(attrs.contains(&(AttrKey::TurnResumed, AttrValue::Bool(true))));
    // Once linked, the paused span's ids are no longer needed.
    assert!(f.contains(&Fact::Released { key: turn1 }));
    t.session_end("ses_1", true);
    let f = drain(&mut t);
    assert!(f.contains(&Fact::Ended {
        key: session,
        status: Status::Error("session error"),
        keep: false
    }));
}

#[test]
fn tool_children_and_subagents() {
    let mut t = Telemetry::new(true);
    t.turn_begin(TurnId(1), None, ("ses_1", "prof", "key"), false);
    t.dispatch_begin(TurnId(1), "t1", "fetch", Dispatch::Mcp, 5);
    t.tool_child_begin(TurnId(1), "t1", ToolChild::Mcp { server: "docs" });
    t.tool_child_end(TurnId(1), "t1", false, None);
    t.dispatch_end(TurnId(1), "t1", Some((true, 40)));
    t.dispatch_begin(TurnId(1), "t2", "launch", Dispatch::Subagent, 5);
    t.subagent_begin(TurnId(1), "t2", "ses_1", "sub_1");
    t.subagent_ended("sub_1", SubagentEnd::Failed);
    let f = drain(&mut t);
    let d1 = opened(&f, SpanName::ToolDispatch)[0].0;
    let d2 = opened(&f, SpanName::ToolDispatch)[1].0;
    let (mcp, parent, _, _) = opened(&f, SpanName::McpCall).remove(0);
    assert_eq!(parent, Parent::Span(d1));
    assert!(f.contains(&Fact::Ended {
        key: mcp,
        status: Status::Error("call failed"),
        keep: false
    }));
    let (sub, parent, links, _) = opened(&f, SpanName::Subagent).remove(0);
    assert_eq!(parent, Parent::Root);
    assert_eq!(
        links,
        vec![Link {
            to: d2,
            kind: LinkKind::Subagent
        }]
    );
    assert!(f.contains(&Fact::Annotated {
        key: sub,
        attrs: vec![(AttrKey::SubagentOutcome, AttrValue::Static("failed"))]
    }));
}
