//! The limiter alone, in virtual time.

use super::*;

fn sid(n: u64) -> SessionId {
    SessionId::new(&format!("ses_{n}"))
}

fn limits(max_concurrent: Option<u32>, rpm: Option<u64>, tpm: Option<u64>) -> EntryLimits {
    EntryLimits {
        max_concurrent,
        requests_per_minute: rpm,
        input_tokens_per_minute: tpm,
        max_wait_ms: 60_000,
    }
}

fn ask(l: &mut ProviderLimits, now: u64, call: u64, entry: &str, tokens: u64) -> Verdict {
    l.ask(
        MonoMs(now),
        Ask {
            call: CallId(call),
            session: sid(call),
            entry,
            tokens,
            not_before: None,
        },
    )
}

fn notices(l: &mut ProviderLimits) -> Vec<Notice> {
    std::iter::from_fn(|| l.poll_notice()).collect()
}

fn go(call: u64) -> Notice {
    Notice::Go {
        call: CallId(call),
        session: sid(call),
    }
}

#[test]
fn concurrency_is_capped_and_the_queue_is_fifo_across_sessions() {
    let mut l = ProviderLimits::new([("a", Some(limits(Some(2), None, None)))], MonoMs(0));
    assert_eq!(ask(&mut l, 0, 1, "a", 10), Verdict::Go);
    assert_eq!(ask(&mut l, 0, 2, "a", 10), Verdict::Go);
    for c in 3..=6 {
        assert_eq!(ask(&mut l, c, c, "a", 10), Verdict::Wait);
    }
    assert!(notices(&mut l).is_empty());
    l.done(MonoMs(10), CallId(2), None);
    assert_eq!(notices(&mut l), vec![go(3)]);
    l.done(MonoMs(11), CallId(1), None);
    l.done(MonoMs(11), CallId(3), None);
    assert_eq!(notices(&mut l), vec![go(4), go(5)]);
    let s = &l.status(MonoMs(20))[0];
    assert_eq!((s.in_flight, s.queued), (2, 1));
    assert_eq!(s.oldest_wait_ms, 14, "call 6 queued at 6");
    // A newcomer goes behind the waiting call even when it could fit.
    l.done(MonoMs(21), CallId(4), None);
    assert_eq!(notices(&mut l), vec![go(6)]);
    assert_eq!(ask(&mut l, 22, 7, "a", 10), Verdict::Wait);
}

#[test]
fn an_unlimited_entry_never_waits() {
    let mut l = ProviderLimits::new(
        [("a", None), ("b", Some(limits(Some(1), None, None)))],
        MonoMs(0),
    );
    assert!(!l.limits("a"));
    for c in 1..=5 {
        assert_eq!(ask(&mut l, 0, c, "a", 1), Verdict::Go);
    }
    assert!(l.is_idle(), "an unlimited entry's calls are not tracked");
    assert_eq!(ask(&mut l, 0, 9, "unknown", 1), Verdict::Go);
}

#[test]
fn requests_per_minute_is_a_bucket() {
    let mut l = ProviderLimits::new([("a", Some(limits(None, Some(60), None)))], MonoMs(0));
    for c in 1..=60 {
        assert_eq!(ask(&mut l, 0, c, "a", 1), Verdict::Go);
        l.done(MonoMs(0), CallId(c), None);
    }
    assert_eq!(ask(&mut l, 0, 61, "a", 1), Verdict::Wait);
    assert_eq!(ask(&mut l, 0, 62, "a", 1), Verdict::Wait);
    assert_eq!(l.poll_timeout(), Some(MonoMs(1000)));
    l.tick(MonoMs(999));
    assert!(notices(&mut l).is_empty());
    l.tick(MonoMs(1000));
    assert_eq!(notices(&mut l), vec![go(61)]);
    assert_eq!(l.poll_timeout(), Some(MonoMs(2000)));
    l.tick(MonoMs(2000));
    assert_eq!(notices(&mut l), vec![go(62)]);
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn input_tokens_are_estimated_then_settled_by_the_usage() {
    let mut l = ProviderLimits::new([("a", Some(limits(None, None, Some(6000))))], MonoMs(0));
    assert_eq!(ask(&mut l, 0, 1, "a", 1000), Verdict::Go);
    // The reply says it used 7000: the bucket owes 1000.
    l.done(MonoMs(0), CallId(1), Some(7000));
    assert_eq!(ask(&mut l, 0, 2, "a", 100), Verdict::Wait);
    // 1100 tokens at 100 per second.
    assert_eq!(l.poll_timeout(), Some(MonoMs(11_000)));
    l.tick(MonoMs(11_000));
    assert_eq!(notices(&mut l), vec![go(2)]);
    // Over-estimated: the rest comes back at once.
    l.done(MonoMs(11_000), CallId(2), Some(10));
    assert_eq!(l.status(MonoMs(11_000))[0].tokens_available, Some(90));
    assert_eq!(estimate_tokens(0), 1);
    assert_eq!(estimate_tokens(4096), 1024);
}

#[test]
fn a_wait_past_the_bound_expires_in_order() {
    let mut lim = limits(Some(1), None, None);
    lim.max_wait_ms = 500;
    let mut l = ProviderLimits::new([("a", Some(lim))], MonoMs(0));
    assert_eq!(ask(&mut l, 0, 1, "a", 1), Verdict::Go);
    assert_eq!(ask(&mut l, 100, 2, "a", 1), Verdict::Wait);
    assert_eq!(ask(&mut l, 200, 3, "a", 1), Verdict::Wait);
    assert_eq!(l.poll_timeout(), Some(MonoMs(600)));
    l.tick(MonoMs(600));
    let expired = Notice::Expired {
        call: CallId(2),
        session: sid(2),
        waited_ms: 500,
    };
    assert_eq!(notices(&mut l), vec![expired]);
    assert_eq!(l.poll_timeout(), Some(MonoMs(700)));
    l.done(MonoMs(650), CallId(1), None);
    assert_eq!(notices(&mut l), vec![go(3)]);
    assert_eq!(l.status(MonoMs(650))[0].expired_total, 1);
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn a_retry_sleeps_until_its_time_then_queues_at_the_back() {
    let mut l = ProviderLimits::new(
        [("a", Some(limits(Some(1), None, None))), ("u", None)],
        MonoMs(0),
    );
    let later = |call: u64, entry, at: u64| Ask {
        call: CallId(call),
        session: sid(call),
        entry,
        tokens: 1,
        not_before: Some(MonoMs(at)),
    };
    // An unlimited entry's retry: a timer only.
    assert_eq!(l.ask(MonoMs(0), later(1, "u", 300)), Verdict::Wait);
    assert_eq!(l.status(MonoMs(0))[1].sleeping, 1);
    assert_eq!(l.poll_timeout(), Some(MonoMs(300)));
    l.tick(MonoMs(299));
    assert!(notices(&mut l).is_empty(), "never before its time");
    l.tick(MonoMs(300));
    assert_eq!(notices(&mut l), vec![go(1)]);
    // A limited one: behind whoever queued while it slept.
    assert_eq!(ask(&mut l, 0, 2, "a", 1), Verdict::Go);
    assert_eq!(l.ask(MonoMs(0), later(3, "a", 100)), Verdict::Wait);
    assert_eq!(ask(&mut l, 50, 4, "a", 1), Verdict::Wait);
    l.tick(MonoMs(100));
    assert!(notices(&mut l).is_empty());
    assert_eq!(l.status(MonoMs(100))[0].queued, 2);
    l.done(MonoMs(120), CallId(2), None);
    l.done(MonoMs(130), CallId(4), None);
    assert_eq!(notices(&mut l), vec![go(4), go(3)]);
    // A time already past means at once.
    assert_eq!(l.ask(MonoMs(500), later(5, "u", 400)), Verdict::Go);
}

#[test]
fn a_cancelled_session_leaves_the_queue_and_its_timers() {
    let mut l = ProviderLimits::new([("a", Some(limits(Some(1), None, None)))], MonoMs(0));
    let ask_for = |l: &mut ProviderLimits, call: u64, session: u64, at: Option<u64>| {
        l.ask(
            MonoMs(0),
            Ask {
                call: CallId(call),
                session: sid(session),
                entry: "a",
                tokens: 1,
                not_before: at.map(MonoMs),
            },
        )
    };
    assert_eq!(ask_for(&mut l, 1, 7, None), Verdict::Go);
    assert_eq!(ask_for(&mut l, 2, 8, None), Verdict::Wait);
    assert_eq!(ask_for(&mut l, 3, 7, Some(50)), Verdict::Wait);
    assert_eq!(ask_for(&mut l, 4, 7, None), Verdict::Wait);
    l.leave(MonoMs(10), "ses_7");
    assert_eq!(
        l.poll_timeout(),
        Some(MonoMs(60_000)),
        "its retry timer went: only call 2's queue bound is left"
    );
    assert_eq!(l.status(MonoMs(10))[0].queued, 1, "its queued call went");
    assert!(
        notices(&mut l).is_empty(),
        "its call in flight keeps the slot"
    );
    l.done(MonoMs(20), CallId(1), None);
    assert_eq!(
        notices(&mut l),
        vec![Notice::Go {
            call: CallId(2),
            session: sid(8)
        }]
    );
    l.done(MonoMs(10), CallId(2), None);
    assert!(l.is_idle());
    l.done(MonoMs(10), CallId(2), None);
}

/// Random asks, retries, completions and cancels against three entries:
/// never more in flight than a cap, FIFO admission per entry, no call
/// queued past its bound, every call ends.
#[test]
fn random_traffic_keeps_the_invariants() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut caps = limits(Some(3), Some(120), Some(5000));
    caps.max_wait_ms = 2_000;
    let names = ["a", "b", "c"];
    let mut l = ProviderLimits::new(names.iter().map(|n| (*n, Some(caps))), MonoMs(0));
    let mut in_flight: BTreeMap<u64, &str> = BTreeMap::new();
    let mut queued_order: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut open = 0u64;
    let mut now = 0u64;
    for call in 1..=2_000u64 {
        now += rnd(40);
        l.tick(MonoMs(now));
        while let Some(n) = l.poll_notice() {
            match n {
                Notice::Go { call, .. } => {
                    let entry = (queued_order.iter_mut())
                        .find(|(_, q)| q.contains(&call.0))
                        .map(|(e, q)| {
                            assert_eq!(q.first(), Some(&call.0), "FIFO per entry");
                            q.remove(0);
                            *e
                        })
                        .unwrap();
                    in_flight.insert(call.0, entry);
                }
                Notice::Expired {
                    call, waited_ms, ..
                } => {
                    assert!(waited_ms >= caps.max_wait_ms);
                    for q in queued_order.values_mut() {
                        q.retain(|c| *c != call.0);
                    }
                    open -= 1;
                }
            }
        }
        for e in names {
            let n = in_flight.values().filter(|x| **x == e).count();
            assert!(n <= 3, "{n} in flight on {e}");
        }
        match rnd(4) {
            0 | 1 => {
                let entry = names[rnd(3) as usize];
                let tokens = 1 + rnd(800);
                open += 1;
                match ask(&mut l, now, call, entry, tokens) {
                    Verdict::Go => {
                        in_flight.insert(call, entry);
                    }
                    Verdict::Wait => queued_order.entry(entry).or_default().push(call),
                }
            }
            _ => {
                if let Some((&c, _)) = in_flight.iter().nth(rnd(4) as usize) {
                    in_flight.remove(&c);
                    open -= 1;
                    l.done(MonoMs(now), CallId(c), Some(rnd(1000)));
                }
            }
        }
    }
    // Drain: finish everything in flight and let the queues run out.
    for _ in 0..10_000 {
        now += 100;
        for c in std::mem::take(&mut in_flight).into_keys() {
            open -= 1;
            l.done(MonoMs(now), CallId(c), None);
        }
        l.tick(MonoMs(now));
        while let Some(n) = l.poll_notice() {
            match n {
                Notice::Go { call, .. } => {
                    in_flight.insert(call.0, "");
                }
                Notice::Expired { .. } => open -= 1,
            }
        }
        if open == 0 {
            break;
        }
    }
    assert_eq!(open, 0, "every call ended");
    assert!(l.is_idle());
}
