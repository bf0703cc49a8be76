//! The exposition format and the counters behind it.

use super::*;

fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[test]
fn every_instrument_of_the_closed_set_is_rendered_with_its_type() {
    let m = Metrics::new(&[]);
    let text = m.render(&Gauges::default(), &RuntimeStats::default());
    for (name, kind) in [
        ("bae_sessions_open", "gauge"),
        ("bae_sessions_total", "gauge"),
        ("bae_events_total", "gauge"),
        ("bae_profiles_count", "gauge"),
        ("bae_keys_count", "gauge"),
        ("bae_mcp_sessions_live", "gauge"),
        ("bae_turns_pending", "gauge"),
        ("bae_sandboxes_live", "gauge"),
        ("bae_subagents_active", "gauge"),
        ("bae_drivers_registered", "gauge"),
        ("bae_turns_completed_total", "counter"),
        ("bae_provider_requests_total", "counter"),
        ("bae_provider_latency_milliseconds", "histogram"),
        ("bae_tool_calls_total", "counter"),
        ("bae_tool_latency_milliseconds", "histogram"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("bae_connections_open", "gauge"),
        ("bae_store_commit_latency_microseconds", "histogram"),
        ("bae_store_commit_batch_writes", "histogram"),
    ] {
        let want = format!("# TYPE {name} {kind}");
        assert!(text.lines().any(|l| l == want), "missing {want}\n{text}");
    }
}

#[test]
fn gauges_carry_the_values_given() {
    let m = Metrics::new(&[]);
    let g = Gauges {
        sessions_open: 3,
        drivers_registered: 5,
        connections: 2,
        ..Gauges::default()
    };
    let text = m.render(&g, &RuntimeStats::default());
    assert_eq!(
        line(&text, "bae_sessions_open "),
        Some("bae_sessions_open 3")
    );
    assert_eq!(
        line(&text, "bae_drivers_registered "),
        Some("bae_drivers_registered 5")
    );
    assert_eq!(
        line(&text, "bae_connections_open "),
        Some("bae_connections_open 2")
    );
}

#[test]
fn counters_count_by_label() {
    let mut m = Metrics::new(&[]);
    m.turn_ended(TurnOutcome::Completed);
    m.turn_ended(TurnOutcome::Completed);
    m.turn_ended(TurnOutcome::Paused);
    m.provider_returned(proto::provider::Kind::Openai, false, 3);
    m.tool_called(Dispatch::Mcp);
    m.tool_called(Dispatch::Client);
    let text = m.render(&Gauges::default(), &RuntimeStats::default());
    for want in [
        "bae_turns_completed_total{outcome=\"completed\"} 2",
        "bae_turns_completed_total{outcome=\"paused\"} 1",
        "bae_turns_completed_total{outcome=\"providers_failed\"} 0",
        "bae_provider_requests_total{provider=\"openai\",outcome=\"error\"} 1",
        "bae_provider_requests_total{provider=\"openai\",outcome=\"ok\"} 0",
        "bae_tool_calls_total{dispatch=\"mcp\"} 1",
        "bae_tool_calls_total{dispatch=\"client\"} 1",
    ] {
        assert!(text.lines().any(|l| l == want), "missing {want}\n{text}");
    }
}

#[test]
fn histogram_buckets_are_cumulative_with_sum_and_count() {
    let mut m = Metrics::new(&[]);
    for ms in [0, 3, 3, 70, 100_000] {
        m.provider_returned(proto::provider::Kind::Anthropic, true, ms);
    }
    let text = m.render(&Gauges::default(), &RuntimeStats::default());
    let b = |le: &str| {
        let p = format!(
            "bae_provider_latency_milliseconds_bucket{{provider=\"anthropic\",le=\"{le}\"}} "
        );
        line(&text, &p)
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(b("1").as_deref(), Some("1"));
    assert_eq!(b("5").as_deref(), Some("3"));
    assert_eq!(b("100").as_deref(), Some("4"));
    assert_eq!(
        b("60000").as_deref(),
        Some("4"),
        "over the last bound: only +Inf"
    );
    assert_eq!(b("+Inf").as_deref(), Some("5"));
    assert!(text.contains("bae_provider_latency_milliseconds_sum{provider=\"anthropic\"} 100076\n"));
    assert!(text.contains("bae_provider_latency_milliseconds_count{provider=\"anthropic\"} 5\n"));
}

#[test]
fn tool_latency_has_no_client_series() {
    let mut m = Metrics::new(&[]);
    m.tool_finished(Dispatch::Sandbox, 12);
    let text = m.render(&Gauges::default(), &RuntimeStats::default());
    assert!(!text.contains("bae_tool_latency_milliseconds_count{dispatch=\"client\"}"));
    assert!(text.contains("bae_tool_latency_milliseconds_count{dispatch=\"sandbox\"} 1\n"));
}

#[test]
fn disabled_instruments_are_left_out() {
    let m = Metrics::new(&["bae.sessions.open".into(), "bae.tool.latency".into()]);
    let text = m.render(&Gauges::default(), &RuntimeStats::default());
    assert!(!text.contains("bae_sessions_open"));
    assert!(!text.contains("bae_tool_latency"));
    assert!(text.contains("bae_sessions_total"));
}

#[test]
fn store_figures_render_from_the_runtime_stats() {
    let mut rt = RuntimeStats {
        rss_bytes: 4096,
        open_fds: 9,
        ..RuntimeStats::default()
    };
    rt.committed(3, 800);
    rt.committed(40, 2_000_000);
    let text = Metrics::new(&[]).render(&Gauges::default(), &rt);
    assert!(text.contains("process_resident_memory_bytes 4096\n"));
    assert!(text.contains("process_open_fds 9\n"));
    assert!(text.contains("bae_store_commit_batch_writes_bucket{le=\"4\"} 1\n"));
    assert!(text.contains("bae_store_commit_batch_writes_count 2\n"));
    assert!(text.contains("bae_store_commit_latency_microseconds_bucket{le=\"1000\"} 1\n"));
    assert!(text.contains("bae_store_commit_latency_microseconds_bucket{le=\"+Inf\"} 2\n"));
}
