use super::*;

fn text(n: usize, tag: &str) -> Value {
    json!({"type": "text", "text": format!("{tag}{}", "x".repeat(n))})
}

fn marked(mut b: Value) -> Value {
    b["cache_control"] = json!({"type": "ephemeral"});
    b
}

fn small() -> CacheConfig {
    CacheConfig {
        anthropic_min_tokens: 100,
        openai_min_tokens: 100,
        openai_step_tokens: 10,
        ..CacheConfig::default()
    }
}

/// A breakpoint writes its prefix; the next request that reaches it
/// within 20 blocks reads it, writes up to its own, and pays input for
/// the rest.
#[test]
fn anthropic_writes_then_reads_the_prefix() {
    let mut c = Cache::new(small());
    let t0 = Instant::now();
    let first = json!({"model": "m", "messages": [
        {"role": "user", "content": [marked(text(800, "a"))]},
    ]});
    let a = c.bill(Endpoint::Anthropic, &first, t0).unwrap();
    assert_eq!(a.cache_read_tokens, 0);
    assert!(a.cache_write_tokens >= 200, "{a:?}");
    assert_eq!(a.input_tokens + a.cache_write_tokens, a.prompt_tokens);
    // The same first block unmarked, as a string would not be: the block
    // form is what is compared.
    let second = json!({"model": "m", "messages": [
        {"role": "user", "content": [text(800, "a")]},
        {"role": "assistant", "content": [text(40, "b")]},
        {"role": "user", "content": [marked(text(400, "c"))]},
    ]});
    let b = c.bill(Endpoint::Anthropic, &second, t0).unwrap();
    assert_eq!(b.cache_read_tokens, a.cache_write_tokens);
    assert_eq!(
        b.cache_write_tokens,
        b.prompt_tokens - b.cache_read_tokens,
        "written up to the end"
    );
    assert_eq!(b.input_tokens, 0);
    // Another model shares nothing.
    let mut other = second.clone();
    other["model"] = json!("n");
    assert_eq!(
        c.bill(Endpoint::Anthropic, &other, t0)
            .unwrap()
            .cache_read_tokens,
        0
    );
}

#[test]
fn anthropic_minimum_ttl_lookback_and_the_limit_of_four() {
    let mut c = Cache::new(small());
    let t0 = Instant::now();
    let short =
        json!({"model": "m", "messages": [{"role": "user", "content": [marked(text(10, "s"))]}]});
    let s = c.bill(Endpoint::Anthropic, &short, t0).unwrap();
    assert_eq!((s.cache_write_tokens, s.too_short), (0, 1));
    assert_eq!(
        c.bill(Endpoint::Anthropic, &short, t0)
            .unwrap()
            .cache_read_tokens,
        0
    );
    // Written, then expired after its TTL.
    let long =
        json!({"model": "m", "messages": [{"role": "user", "content": [marked(text(800, "l"))]}]});
    c.bill(Endpoint::Anthropic, &long, t0).unwrap();
    let later = t0 + Duration::from_secs(299);
    assert!(
        c.bill(Endpoint::Anthropic, &long, later)
            .unwrap()
            .cache_read_tokens
            > 0
    );
    // The hit refreshed it: still there 299 s after the hit.
    let again = later + Duration::from_secs(299);
    assert!(
        c.bill(Endpoint::Anthropic, &long, again)
            .unwrap()
            .cache_read_tokens
            > 0
    );
    let gone = again + Duration::from_secs(301);
    assert_eq!(
        c.bill(Endpoint::Anthropic, &long, gone)
            .unwrap()
            .cache_read_tokens,
        0
    );
    // A prefix more than 20 blocks before the breakpoint is not found.
    let mut blocks = vec![text(800, "l")];
    blocks.extend((0..21).map(|i| text(4, &format!("k{i}"))));
    let last = blocks.pop().unwrap();
    blocks.push(marked(last));
    let far = json!({"model": "m", "messages": [{"role": "user", "content": blocks}]});
    assert_eq!(
        c.bill(Endpoint::Anthropic, &far, gone)
            .unwrap()
            .cache_read_tokens,
        0
    );
    // Five breakpoints are refused as the API refuses them.
    let five: Vec<Value> = (0..5).map(|i| marked(text(4, &format!("f{i}")))).collect();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": five}]});
    assert!(c.bill(Endpoint::Anthropic, &body, t0).is_err());
}

/// OpenAI reads the longest prefix seen, in steps, from the minimum on;
/// another cache key shares nothing.
#[test]
fn openai_caches_prefixes_automatically() {
    let mut c = Cache::new(small());
    let t0 = Instant::now();
    let msg =
        |n: usize, tag: &str| json!({"role": "user", "content": format!("{tag}{}", "y".repeat(n))});
    let first = json!({"model": "m", "prompt_cache_key": "k", "messages": [msg(1000, "a")]});
    let a = c.bill(Endpoint::Openai, &first, t0).unwrap();
    assert_eq!(a.cache_read_tokens, 0);
    let second =
        json!({"model": "m", "prompt_cache_key": "k", "messages": [msg(1000, "a"), msg(300, "b")]});
    let b = c.bill(Endpoint::Openai, &second, t0).unwrap();
    assert!(
        b.cache_read_tokens >= 200 && b.cache_read_tokens <= a.prompt_tokens,
        "{b:?}"
    );
    assert_eq!(b.cache_read_tokens % 10, 0);
    assert_eq!(b.input_tokens + b.cache_read_tokens, b.prompt_tokens);
    let other = json!({"model": "m", "prompt_cache_key": "j", "messages": [msg(1000, "a")]});
    assert_eq!(
        c.bill(Endpoint::Openai, &other, t0)
            .unwrap()
            .cache_read_tokens,
        0
    );
    let tiny = json!({"model": "m", "prompt_cache_key": "k", "messages": [msg(10, "t")]});
    c.bill(Endpoint::Openai, &tiny, t0).unwrap();
    assert_eq!(
        c.bill(Endpoint::Openai, &tiny, t0)
            .unwrap()
            .cache_read_tokens,
        0
    );
}

/// The usage the cache puts in a reply, in each wire format.
#[test]
fn usage_in_the_reply() {
    let call = CacheCall {
        endpoint: Endpoint::Anthropic,
        model: "m".into(),
        tools_mark: None,
        marks: vec![90],
        prompt_tokens: 100,
        input_tokens: 10,
        cache_write_tokens: 20,
        cache_read_tokens: 70,
        breakpoints: 2,
        too_short: 0,
    };
    let mut reply = json!({"usage": {"input_tokens": 1, "output_tokens": 5}});
    apply(&mut reply, &call);
    assert_eq!(
        reply["usage"],
        json!({"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 70, "output_tokens": 5})
    );
    let openai = CacheCall {
        endpoint: Endpoint::Openai,
        ..call.clone()
    };
    let mut reply =
        json!({"usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}});
    apply(&mut reply, &openai);
    assert_eq!(reply["usage"]["prompt_tokens"], 100);
    assert_eq!(reply["usage"]["prompt_tokens_details"]["cached_tokens"], 70);
    let mut none = json!({"content": []});
    apply(&mut none, &call);
    assert!(none.get("usage").is_none());
    assert!((call.billed() - (10.0 + 25.0 + 7.0)).abs() < 1e-9);
}
