//! Crash safety: `kill -9` the real server at random points of a concurrent
//! workload, restart it on the same database, and check that nothing any
//! client was shown was lost, duplicated or reordered, and that sessions,
//! keys and paused turns are usable again (docs/storage.md "Durability
//! rule"; spec 02 §1; spec 08 §1.1).
//!
//! Each of [`ITERATIONS`] rounds runs [`WORKERS`] worker threads and one
//! observer thread against a server backed by two loopback mock providers
//! (`text` always answers "ok"; `tools` always asks for the client tool
//! `lookup`, so every turn on a tools session pauses), kills the server
//! after a random delay, restarts it and verifies:
//!
//! - every event a client was shown (sendMessage/subscribe notifications
//!   and `result.events`) is listed, identical, by `GET …/events` on both
//!   ports; each shown sequence keeps its order; no event id appears twice
//!   or in two sessions; the log verified after the previous restart is a
//!   prefix of the current one; small-page cursors increase;
//! - every 2xx answer survived: profiles, client keys, sessions, joins
//!   (session keys authenticate), closes (`closed`), revocations (401,
//!   cascade); driver registrations are gone after the restart as the spec
//!   says (participants empty; they are made again before the turns), or
//!   kept with `CRASH_DURABLE_DRIVERS=1` (runs the server with the
//!   `BAE_DURABLE_DRIVERS` extension);
//! - every open session accepts a turn: a plain turn on text sessions; on a
//!   tools session whose log ends on a paused assistant message, either
//!   the owner resumes it with the tool results or another driver retires
//!   it (`BAE_TURN_TIMEOUT=0`, `driver_turn_abandoned`);
//! - client keys still authenticate and the admin key is unchanged.
//!
//! The workload is driven by a seeded PRNG (`CRASH_SEED` overrides the
//! default seed; the seed is printed); thread interleavings still vary from
//! run to run.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::http::next_rpc_id;
use testkit::{rpc_request, HttpClient, MockProvider, Reply, Server, ServerOptions};

mod live_support;

const ITERATIONS: usize = 20;
const WORKERS: usize = 3;
/// Cap on regular (non-solo) sessions still taking turns, and on all of
/// them.
const MAX_SESSIONS: usize = 12;
const MAX_TOTAL_SESSIONS: usize = 30;
/// Plain verification turns per restart (besides every recovered pause).
const VERIFY_TURNS: usize = 10;
/// A session whose verified log reached this many events takes no more
/// turns (provider requests carry the whole history, so logs grow
/// quadratically in bytes; this keeps every verification cheap).
const FULL_EVENTS: usize = 100;
const MAX_SOLO: usize = 8;
const TOOL: &str = "lookup";
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_SEED: u64 = 0x5eed_c0ff_ee15_900d;

// ---------------------------------------------------------------- PRNG ---

/// splitmix64.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

// --------------------------------------------------------------- model ---

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Tools,
}

#[derive(Debug, Clone)]
struct KeyRec {
    id: String,
    plaintext: String,
    profile_id: String,
    /// Only used to open solo sessions; the only keys ever revoked.
    revocable: bool,
    revoked: bool,
    /// A revocation was sent and no answer came back.
    maybe_revoked: bool,
}

#[derive(Debug, Clone)]
struct Participant {
    key_id: String,
    session_key: String,
    registered: bool,
}

#[derive(Debug, Clone)]
struct SessRec {
    id: String,
    kind: Kind,
    profile_id: String,
    /// Creator first.
    parts: Vec<Participant>,
    /// Opened by a revocable key and never joined.
    solo: bool,
    closed: bool,
    /// A close was sent and no answer came back.
    maybe_closed: bool,
    /// One request at a time on tools sessions (only the creator drives
    /// them during the workload).
    busy: bool,
    /// The creator's last known pause (tool_use ids), from its own results.
    pause: Option<Vec<String>>,
}

impl SessRec {
    fn usable(&self) -> bool {
        !self.closed && !self.maybe_closed
    }
}

#[derive(Debug, Clone)]
struct ProfileRec {
    id: String,
    name: String,
}

/// Everything acknowledged to a client.
#[derive(Debug, Default)]
struct Model {
    profiles: Vec<ProfileRec>,
    keys: Vec<KeyRec>,
    sessions: Vec<SessRec>,
    /// Sequences of EventViews in the order one stream or result showed
    /// them: (session id, events).
    shown: Vec<(String, Vec<Value>)>,
    /// Event ids listed by the previous verification, per session.
    prev_listing: HashMap<String, Vec<String>>,
    /// Sessions a text turn was refused on as not registered (`-32001`):
    /// only a close racing the turn may do that (it clears registrations,
    /// spec 01 §4.3, and registration is checked first, §6.5), so the next
    /// verification finds each of them no longer open.
    refused_unregistered: Vec<String>,
    /// Counters for the summary line.
    turns: usize,
    joins: usize,
    closes: usize,
    revocations: usize,
    kills: usize,
    /// Recovered pauses resumed by their owner / retired by another driver.
    resumed: usize,
    retired: usize,
}

impl Model {
    fn key(&self, id: &str) -> &KeyRec {
        self.keys.iter().find(|k| k.id == id).expect("known key")
    }

    fn key_ok(&self, id: &str) -> bool {
        let k = self.key(id);
        !k.revoked && !k.maybe_revoked
    }

    fn session_mut(&mut self, id: &str) -> &mut SessRec {
        self.sessions
            .iter_mut()
            .find(|s| s.id == id)
            .expect("known session")
    }

    /// Still taking turns (see [`FULL_EVENTS`]).
    fn growing(&self, s: &SessRec) -> bool {
        s.usable() && self.prev_listing.get(&s.id).map_or(0, Vec::len) < FULL_EVENTS
    }

    fn record(&mut self, session_id: &str, events: Vec<Value>) {
        if !events.is_empty() {
            self.shown.push((session_id.to_string(), events));
        }
    }
}

type Shared = Arc<Mutex<Model>>;

fn lock(m: &Shared) -> MutexGuard<'_, Model> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------ clients ---

/// Outcome of one JSON-RPC exchange that may be cut by a kill.
#[derive(Debug, Default)]
struct Outcome {
    /// `session.event` params, in arrival order.
    notes: Vec<Value>,
    terminal: Option<Value>,
}

impl Outcome {
    fn result(&self) -> Option<&Value> {
        self.terminal.as_ref().and_then(|t| t.get("result"))
    }

    fn result_events(&self) -> Vec<Value> {
        self.result()
            .and_then(|r| r.get("events"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

fn rpc(client: &HttpClient, sid: &str, skey: &str, method: &str, params: Value) -> Outcome {
    let mut out = Outcome::default();
    let body = serde_json::to_vec(&rpc_request(method, params, next_rpc_id())).unwrap();
    let Ok(mut stream) = client.try_rpc_stream_bytes(sid, skey, &body) else {
        return out;
    };
    let deadline = Instant::now() + HTTP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let Some(line) = stream.next_line(left) else {
            break;
        };
        // A line cut by the kill is not JSON: never shown, ignored.
        let Ok(frame) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if frame.get("id").is_some() {
            out.terminal = Some(frame);
            break;
        }
        if frame["method"] == "session.event" {
            out.notes.push(frame["params"].clone());
        }
    }
    out
}

fn send(client: &HttpClient, sid: &str, skey: &str, content: Value) -> Outcome {
    rpc(
        client,
        sid,
        skey,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": content}}),
    )
}

fn post(client: &HttpClient, path: &str, body: &Value) -> Option<testkit::Response> {
    let bytes = serde_json::to_vec(body).unwrap();
    client
        .try_request(
            "POST",
            path,
            &[("content-type", "application/json")],
            &bytes,
        )
        .ok()
}

fn tool_decl() -> Value {
    json!({"name": TOOL, "description": "look something up", "input_schema": {"type": "object"}})
}

/// The `tool_use` ids of an assistant message.
fn tool_use_ids(message: &Value) -> Vec<String> {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of an assistant message (string or first text block).
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .find(|b| b["type"] == "text")
            .and_then(|b| b["text"].as_str())
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

fn tool_results(ids: &[String]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "42"}))
            .collect(),
    )
}

// ----------------------------------------------------------- workload ---

struct Ctx {
    client: HttpClient,
    admin: HttpClient,
    model: Shared,
    stop: Arc<AtomicBool>,
    text_profile: String,
    tools_profile: String,
}

impl Ctx {
    fn profile_of(&self, kind: Kind) -> &str {
        match kind {
            Kind::Text => &self.text_profile,
            Kind::Tools => &self.tools_profile,
        }
    }

    /// `POST /admin/v1/keys`; recorded on 201.
    fn create_key(&self, profile_id: &str, revocable: bool) -> Option<KeyRec> {
        let r = post(
            &self.admin,
            "/admin/v1/keys",
            &json!({"name": format!("crash-{}", next_rpc_id()), "profile_id": profile_id}),
        )?;
        if r.status != 201 {
            return None;
        }
        let v = r.json();
        let rec = KeyRec {
            id: v["id"].as_str()?.to_string(),
            plaintext: v["key"].as_str()?.to_string(),
            profile_id: profile_id.to_string(),
            revocable,
            revoked: false,
            maybe_revoked: false,
        };
        lock(&self.model).keys.push(rec.clone());
        Some(rec)
    }

    /// An active, non-revocable key of the profile (creating one sometimes).
    fn some_key(&self, rng: &mut Rng, profile_id: &str, exclude: &[String]) -> Option<KeyRec> {
        let candidates: Vec<KeyRec> = {
            let m = lock(&self.model);
            m.keys
                .iter()
                .filter(|k| {
                    k.profile_id == profile_id
                        && !k.revocable
                        && !k.revoked
                        && !k.maybe_revoked
                        && !exclude.contains(&k.id)
                })
                .cloned()
                .collect()
        };
        if candidates.len() < 3 && (candidates.is_empty() || rng.percent(50)) {
            return self.create_key(profile_id, false);
        }
        Some(candidates[rng.below(candidates.len())].clone())
    }

    fn register(&self, sid: &str, key_id: &str, skey: &str) {
        let out = rpc(&self.client, sid, skey, "session.registerDriver", json!({}));
        if out.result().and_then(|r| r.get("registered")) == Some(&Value::Bool(true)) {
            let mut m = lock(&self.model);
            let s = m.session_mut(sid);
            if let Some(p) = s.parts.iter_mut().find(|p| p.key_id == key_id) {
                p.registered = true;
            }
        }
    }

    fn open_session(&self, rng: &mut Rng, kind: Kind) {
        let profile_id = self.profile_of(kind).to_string();
        let Some(key) = self.some_key(rng, &profile_id, &[]) else {
            return;
        };
        let body = match kind {
            Kind::Text => json!({"client_version": "crash/1"}),
            Kind::Tools => json!({"tools": [tool_decl()]}),
        };
        let Some(r) = post(
            &self.client.clone().bearer(key.plaintext.clone()),
            "/api/v1/sessions",
            &body,
        ) else {
            return;
        };
        assert_eq!(r.status, 201, "open session: {}", r.text());
        let v = r.json();
        let sid = v["session_id"].as_str().unwrap().to_string();
        let skey = v["session_key"].as_str().unwrap().to_string();
        lock(&self.model).sessions.push(SessRec {
            id: sid.clone(),
            kind,
            profile_id,
            parts: vec![Participant {
                key_id: key.id.clone(),
                session_key: skey.clone(),
                registered: false,
            }],
            solo: false,
            closed: false,
            maybe_closed: false,
            busy: false,
            pause: None,
        });
        self.register(&sid, &key.id, &skey);
    }

    fn join(&self, rng: &mut Rng) {
        let target = {
            let m = lock(&self.model);
            let open: Vec<&SessRec> = m
                .sessions
                .iter()
                .filter(|s| s.usable() && !s.solo && s.parts.len() < 4)
                .collect();
            if open.is_empty() {
                return;
            }
            let s = open[rng.below(open.len())];
            (
                s.id.clone(),
                s.kind,
                s.profile_id.clone(),
                s.parts.iter().map(|p| p.key_id.clone()).collect::<Vec<_>>(),
            )
        };
        let (sid, kind, profile_id, existing) = target;
        let Some(key) = self.some_key(rng, &profile_id, &existing) else {
            return;
        };
        // Joiners of tools sessions declare the tool too (otherwise a turn
        // of theirs would loop on an unknown tool until the loop limit).
        let body = match kind {
            Kind::Text => json!({}),
            Kind::Tools => json!({"tools": [tool_decl()]}),
        };
        let Some(r) = post(
            &self.client.clone().bearer(key.plaintext.clone()),
            &format!("/api/v1/sessions/{sid}/join"),
            &body,
        ) else {
            return;
        };
        if r.status != 201 {
            // Closed meanwhile (409) is the only expected refusal.
            assert_eq!(r.status, 409, "join: {}", r.text());
            return;
        }
        let skey = r.json()["session_key"].as_str().unwrap().to_string();
        {
            let mut m = lock(&self.model);
            m.joins += 1;
            m.session_mut(&sid).parts.push(Participant {
                key_id: key.id.clone(),
                session_key: skey.clone(),
                registered: false,
            });
        }
        if rng.percent(85) {
            self.register(&sid, &key.id, &skey);
        }
    }

    /// A plain turn by a registered participant of a text session.
    fn text_turn(&self, rng: &mut Rng) {
        let pick = {
            let m = lock(&self.model);
            let cands: Vec<(String, String)> = m
                .sessions
                .iter()
                .filter(|s| m.growing(s) && s.kind == Kind::Text)
                .flat_map(|s| {
                    s.parts
                        .iter()
                        .filter(|p| p.registered && m.key_ok(&p.key_id))
                        .map(|p| (s.id.clone(), p.session_key.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            if cands.is_empty() {
                return;
            }
            cands[rng.below(cands.len())].clone()
        };
        let (sid, skey) = pick;
        let out = send(
            &self.client,
            &sid,
            &skey,
            json!(format!("hello {}", rng.next())),
        );
        let mut m = lock(&self.model);
        m.record(&sid, out.notes.clone());
        m.record(&sid, out.result_events());
        if out.result().is_some() {
            m.turns += 1;
        } else if let Some(t) = &out.terminal {
            // The only acceptable errors: the session was closed meanwhile,
            // seen as not open, or as not registered (checked later).
            if t["error"]["code"] == -32001 {
                m.refused_unregistered.push(sid.clone());
            } else {
                assert_eq!(t["error"]["code"], -32000, "text turn: {t}");
            }
        }
    }

    /// The creator of a tools session: resume its pause or start a turn.
    fn tools_turn(&self, rng: &mut Rng) {
        let pick = {
            let mut m = lock(&self.model);
            let idx: Vec<usize> = (0..m.sessions.len())
                .filter(|&i| {
                    let s = &m.sessions[i];
                    m.growing(s)
                        && s.kind == Kind::Tools
                        && !s.busy
                        && s.parts[0].registered
                        && m.key_ok(&s.parts[0].key_id)
                })
                .collect();
            if idx.is_empty() {
                return;
            }
            let s = &mut m.sessions[idx[rng.below(idx.len())]];
            s.busy = true;
            (
                s.id.clone(),
                s.parts[0].session_key.clone(),
                s.pause.clone(),
            )
        };
        let (sid, skey, pause) = pick;
        let content = match &pause {
            Some(ids) if rng.percent(70) => tool_results(ids),
            _ => json!(format!("step {}", rng.next())),
        };
        let out = send(&self.client, &sid, &skey, content);
        let mut m = lock(&self.model);
        m.record(&sid, out.notes.clone());
        m.record(&sid, out.result_events());
        let s = m.session_mut(&sid);
        s.busy = false;
        match (&out.terminal, out.result()) {
            (_, Some(r)) => {
                let ids = tool_use_ids(&r["message"]);
                assert!(!ids.is_empty(), "tools turn did not pause: {r}");
                s.pause = Some(ids);
                m.turns += 1;
            }
            (Some(t), None) => {
                // A continuation that found no pause (the previous request
                // died with the server before pausing) records nothing.
                assert_eq!(t["error"]["code"], -32000, "tools turn: {t}");
                s.pause = None;
            }
            (None, None) => {}
        }
    }

    /// A revocable key opening a solo session (with one turn).
    fn solo_session(&self) {
        let Some(key) = self.create_key(&self.text_profile, true) else {
            return;
        };
        let Some(r) = post(
            &self.client.clone().bearer(key.plaintext.clone()),
            "/api/v1/sessions",
            &json!({}),
        ) else {
            return;
        };
        assert_eq!(r.status, 201, "solo open: {}", r.text());
        let v = r.json();
        let sid = v["session_id"].as_str().unwrap().to_string();
        let skey = v["session_key"].as_str().unwrap().to_string();
        lock(&self.model).sessions.push(SessRec {
            id: sid.clone(),
            kind: Kind::Text,
            profile_id: self.text_profile.clone(),
            parts: vec![Participant {
                key_id: key.id.clone(),
                session_key: skey.clone(),
                registered: false,
            }],
            solo: true,
            closed: false,
            maybe_closed: false,
            busy: false,
            pause: None,
        });
        self.register(&sid, &key.id, &skey);
    }

    fn revoke(&self, rng: &mut Rng) {
        let key_id = {
            let mut m = lock(&self.model);
            // Only keys whose solo session is recorded (never one whose
            // session open may still be in flight).
            let cands: Vec<usize> = (0..m.keys.len())
                .filter(|&i| {
                    let k = &m.keys[i];
                    k.revocable
                        && !k.revoked
                        && !k.maybe_revoked
                        && m.sessions
                            .iter()
                            .any(|s| s.solo && s.parts[0].key_id == k.id)
                })
                .collect();
            if cands.is_empty() {
                return;
            }
            let k = &mut m.keys[cands[rng.below(cands.len())]];
            k.maybe_revoked = true;
            k.id.clone()
        };
        let r = self
            .admin
            .try_request("DELETE", &format!("/admin/v1/keys/{key_id}"), &[], b"");
        let mut m = lock(&self.model);
        match r {
            Ok(r) if r.status == 204 => {
                m.revocations += 1;
                let k = m.keys.iter_mut().find(|k| k.id == key_id).unwrap();
                k.revoked = true;
                k.maybe_revoked = false;
                // Its sessions are solo: the cascade closes every one.
                for s in m.sessions.iter_mut() {
                    if s.parts[0].key_id == key_id {
                        assert!(s.solo);
                        s.closed = true;
                    }
                }
            }
            Ok(r) => panic!("revoke {key_id}: {} {}", r.status, r.text()),
            Err(_) => {} // stays maybe_revoked
        }
    }

    /// `DELETE /api/v1/sessions/{id}` by a participant.
    fn close(&self, rng: &mut Rng) {
        let pick = {
            let mut m = lock(&self.model);
            let open_regular = m.sessions.iter().filter(|s| s.usable() && !s.solo).count();
            let cands: Vec<usize> = (0..m.sessions.len())
                .filter(|&i| {
                    let s = &m.sessions[i];
                    s.usable() && !s.busy && (s.solo || open_regular > 6)
                })
                .collect();
            if cands.is_empty() {
                return;
            }
            let i = cands[rng.below(cands.len())];
            let part = {
                let s = &m.sessions[i];
                let ok: Vec<&Participant> =
                    s.parts.iter().filter(|p| m.key_ok(&p.key_id)).collect();
                if ok.is_empty() {
                    return;
                }
                ok[rng.below(ok.len())].session_key.clone()
            };
            let s = &mut m.sessions[i];
            s.maybe_closed = true;
            (s.id.clone(), part)
        };
        let (sid, skey) = pick;
        let r = self.client.clone().bearer(skey).try_request(
            "DELETE",
            &format!("/api/v1/sessions/{sid}"),
            &[],
            b"",
        );
        let mut m = lock(&self.model);
        match r {
            Ok(r) if r.status == 200 => {
                m.closes += 1;
                let s = m.session_mut(&sid);
                s.closed = true;
                s.maybe_closed = false;
            }
            // A concurrent revocation closed it (409) or revoked the
            // session key (401): resolved from the admin state later.
            Ok(r) if r.status == 409 || r.status == 401 => {}
            Ok(r) => panic!("close {sid}: {} {}", r.status, r.text()),
            Err(_) => {} // stays maybe_closed
        }
    }

    fn create_profile(&self) {
        let name = format!("crash-extra-{}", next_rpc_id());
        let Some(r) = post(
            &self.admin,
            "/admin/v1/profiles",
            &json!({"name": name, "primary_provider": "text"}),
        ) else {
            return;
        };
        assert_eq!(r.status, 201, "create profile: {}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_string();
        lock(&self.model).profiles.push(ProfileRec { id, name });
    }

    fn step(&self, rng: &mut Rng) {
        let (regular, total, solo) = {
            let m = lock(&self.model);
            (
                m.sessions
                    .iter()
                    .filter(|s| !s.solo && m.growing(s))
                    .count(),
                m.sessions.iter().filter(|s| !s.solo).count(),
                m.sessions.iter().filter(|s| s.solo).count(),
            )
        };
        match rng.below(100) {
            0..=7 if regular < MAX_SESSIONS && total < MAX_TOTAL_SESSIONS => {
                let kind = if rng.percent(35) {
                    Kind::Tools
                } else {
                    Kind::Text
                };
                self.open_session(rng, kind);
            }
            8..=15 => self.join(rng),
            16..=64 => self.text_turn(rng),
            65..=89 => self.tools_turn(rng),
            90..=92 if solo < MAX_SOLO => self.solo_session(),
            93..=95 => self.revoke(rng),
            96..=97 => self.close(rng),
            98..=99 => self.create_profile(),
            _ => self.text_turn(rng),
        }
    }
}

fn worker(ctx: Arc<Ctx>, mut rng: Rng) {
    while !ctx.stop.load(Ordering::Relaxed) {
        ctx.step(&mut rng);
        if rng.percent(30) {
            thread::sleep(Duration::from_millis(rng.between(0, 4)));
        }
    }
}

/// Subscribes to random sessions (full replay, or since a known event) and
/// records everything streamed until the server dies.
fn observer(ctx: Arc<Ctx>, mut rng: Rng) {
    let pick = {
        let m = lock(&ctx.model);
        let cands: Vec<(String, String, Option<String>)> = m
            .sessions
            .iter()
            .filter_map(|s| {
                let p = s.parts.iter().find(|p| m.key_ok(&p.key_id))?;
                let since = m
                    .prev_listing
                    .get(&s.id)
                    .and_then(|l| l.get(l.len() / 2).cloned());
                Some((s.id.clone(), p.session_key.clone(), since))
            })
            .collect();
        if cands.is_empty() {
            return;
        }
        cands[rng.below(cands.len())].clone()
    };
    let (sid, skey, since) = pick;
    let params = match since {
        Some(id) if rng.percent(50) => json!({"since_event_id": id}),
        _ => json!({}),
    };
    let out = rpc(&ctx.client, &sid, &skey, "session.subscribe", params);
    lock(&ctx.model).record(&sid, out.notes);
}

// -------------------------------------------------------- verification ---

fn get_json(c: &HttpClient, path: &str) -> Value {
    let r = c
        .try_request("GET", path, &[], b"")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

/// Every item of a paginated list with page size `limit`; also returns the
/// `next_cursor` values seen.
fn all_pages(c: &HttpClient, path: &str, limit: usize) -> (Vec<Value>, Vec<String>) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut items = Vec::new();
    let mut cursors = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = get_json(c, &format!("{path}{sep}limit={limit}&cursor={cursor}"));
        let batch = page["items"].as_array().expect("items").clone();
        assert!(batch.len() <= limit, "page larger than limit");
        items.extend(batch);
        match page["next_cursor"].as_str() {
            Some(next) => {
                assert!(!cursors.contains(&next.to_string()), "cursor repeats");
                cursors.push(next.to_string());
                cursor = next.to_string();
            }
            None => return (items, cursors),
        }
    }
}

/// The tool_use ids and owner of the paused assistant message a log ends
/// on (spec 01 §8.2; engine recovery rule), if any.
fn paused_at_end(log: &[Value]) -> Option<(Vec<String>, String)> {
    let last = log.iter().rev().find(|e| {
        e["event_type"] == "client.message.send" || e["event_type"] == "server.message.send"
    })?;
    if last["event_type"] != "server.message.send" {
        return None;
    }
    let role = last["payload"]["role"].as_str().unwrap_or("assistant");
    let tagged: Vec<String> = last["payload"]["content"]
        .as_array()?
        .iter()
        .filter(|b| b["type"] == "tool_use" && b.get("dispatch").is_some())
        .filter_map(|b| b["id"].as_str().map(str::to_string))
        .collect();
    (role == "assistant" && !tagged.is_empty()).then(|| {
        (
            tagged,
            last["client_key_id"].as_str().unwrap_or("").to_string(),
        )
    })
}

struct Verifier<'a> {
    server: &'a Server,
    model: &'a Shared,
    rng: Rng,
    /// `BAE_DURABLE_DRIVERS` is on: registrations survive the restart.
    durable_drivers: bool,
}

impl Verifier<'_> {
    fn admin(&self) -> HttpClient {
        self.server.admin().timeout(HTTP_TIMEOUT)
    }

    fn client(&self) -> HttpClient {
        self.server.client().timeout(HTTP_TIMEOUT)
    }

    /// Resolves uncertain revocations and closes from what the server says.
    fn resolve_uncertainty(
        &mut self,
        states: &HashMap<String, String>,
        listed_keys: &HashSet<String>,
    ) {
        let mut m = lock(self.model);
        let mut newly_revoked = Vec::new();
        for k in m.keys.iter_mut().filter(|k| k.maybe_revoked) {
            k.maybe_revoked = false;
            if !listed_keys.contains(&k.id) {
                k.revoked = true;
                newly_revoked.push(k.id.clone());
            }
        }
        for s in m.sessions.iter_mut() {
            if newly_revoked.contains(&s.parts[0].key_id) {
                s.closed = true;
                s.maybe_closed = false;
            }
            if s.maybe_closed {
                s.maybe_closed = false;
                s.closed = states.get(&s.id).map(String::as_str) == Some("closed");
            }
            s.busy = false;
        }
    }

    fn verify(&mut self, iteration: usize) {
        let admin = self.admin();
        // Admin state of every session; acked sessions must all be listed.
        let (sessions, _) = all_pages(&admin, "/admin/v1/sessions", 200);
        let states: HashMap<String, String> = sessions
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_string(),
                    s["state"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let (keys, _) = all_pages(&admin, "/admin/v1/keys", 200);
        let listed_keys: HashSet<String> = keys
            .iter()
            .map(|k| k["id"].as_str().unwrap().to_string())
            .collect();
        self.resolve_uncertainty(&states, &listed_keys);
        for sid in std::mem::take(&mut lock(self.model).refused_unregistered) {
            assert_ne!(
                states.get(&sid).map(String::as_str),
                Some("open"),
                "{sid}: a text turn was refused as not registered on an open session"
            );
        }

        let m = lock(self.model);
        // Profiles: every 201 is still there with its name.
        for p in &m.profiles {
            let v = get_json(&admin, &format!("/admin/v1/profiles/{}", p.id));
            assert_eq!(v["name"], p.name.as_str(), "iteration {iteration}");
        }
        // Keys: active ones listed with their prefix, revoked ones gone.
        let by_id: HashMap<&str, &Value> = keys
            .iter()
            .map(|k| (k["id"].as_str().unwrap(), k))
            .collect();
        for k in &m.keys {
            match by_id.get(k.id.as_str()) {
                Some(v) => {
                    assert!(!k.revoked, "revoked key {} listed", k.id);
                    assert_eq!(v["prefix"], &k.plaintext[..8]);
                    assert_eq!(v["profile_id"], k.profile_id.as_str());
                }
                None => assert!(k.revoked, "key {} lost (iteration {iteration})", k.id),
            }
            // Client key auth: a join of an unknown session is 404 once
            // authenticated, 401 otherwise.
            let r = self
                .client()
                .bearer(k.plaintext.clone())
                .try_request(
                    "POST",
                    "/api/v1/sessions/ses_00000000000000000000000000000000/join",
                    &[("content-type", "application/json")],
                    b"{}",
                )
                .expect("join probe");
            let expected = if k.revoked { 401 } else { 404 };
            assert_eq!(r.status, expected, "client key {} auth: {}", k.id, r.text());
        }
        // Sessions: listed, state as acknowledged.
        for s in &m.sessions {
            let state = states
                .get(&s.id)
                .unwrap_or_else(|| panic!("session {} lost (iteration {iteration})", s.id));
            let expected = if s.closed { "closed" } else { "open" };
            assert_eq!(
                state, expected,
                "session {} state (iteration {iteration})",
                s.id
            );
        }
        drop(m);
        self.verify_logs(iteration);
    }

    fn verify_logs(&mut self, iteration: usize) {
        let admin = self.admin();
        let sessions: Vec<SessRec> = lock(self.model).sessions.clone();
        let mut owner_of: HashMap<String, String> = HashMap::new();
        let mut listings: HashMap<String, Vec<Value>> = HashMap::new();
        for s in &sessions {
            // Small pages on a few sessions exercise the cursors.
            let known = lock(self.model).prev_listing.get(&s.id).map(Vec::len);
            let limit = match known {
                _ if !self.rng.percent(25) => 200,
                Some(n) if n >= 40 => 8 + self.rng.below(24),
                _ => 1 + self.rng.below(4),
            };
            let (log, cursors) = all_pages(
                &admin,
                &format!("/admin/v1/sessions/{}/events", s.id),
                limit,
            );
            let nums: Vec<u64> = cursors.iter().filter_map(|c| c.parse().ok()).collect();
            if nums.len() == cursors.len() {
                assert!(
                    nums.windows(2).all(|w| w[0] < w[1]),
                    "cursors not increasing: {cursors:?}"
                );
            }
            // Every participant whose key is active reads the same log on
            // the client port (session keys survived).
            let m = lock(self.model);
            for p in &s.parts {
                let r = self
                    .client()
                    .bearer(p.session_key.clone())
                    .try_request(
                        "GET",
                        &format!("/api/v1/sessions/{}/events?limit=1", s.id),
                        &[],
                        b"",
                    )
                    .expect("events");
                if !m.key_ok(&p.key_id) {
                    assert_eq!(r.status, 401, "session key of a revoked client key");
                    continue;
                }
                assert_eq!(r.status, 200, "session key of {}: {}", p.key_id, r.text());
            }
            // The client-port listing must equal the admin one; compared in
            // full whenever the log changed since the last verification.
            let changed = known != Some(log.len());
            if let Some(p) = s.parts.iter().find(|p| changed && m.key_ok(&p.key_id)) {
                drop(m);
                let (client_log, _) = all_pages(
                    &self.client().bearer(p.session_key.clone()),
                    &format!("/api/v1/sessions/{}/events", s.id),
                    200,
                );
                assert_eq!(client_log, log, "client and admin logs differ for {}", s.id);
            }
            assert_eq!(
                log.first().map(|e| e["event_type"].clone()),
                Some(json!("session.open")),
                "{} does not start with session.open",
                s.id
            );
            for e in &log {
                let id = e["id"].as_str().unwrap().to_string();
                if let Some(other) = owner_of.insert(id.clone(), s.id.clone()) {
                    panic!("event {id} listed twice ({other} and {})", s.id);
                }
            }
            listings.insert(s.id.clone(), log);
        }

        let mut m = lock(self.model);
        // The previously verified log is a prefix of the current one.
        for (sid, prev) in &m.prev_listing {
            let now: Vec<&str> = listings[sid]
                .iter()
                .map(|e| e["id"].as_str().unwrap())
                .collect();
            assert!(
                now.len() >= prev.len() && prev.iter().zip(&now).all(|(a, b)| a == b),
                "iteration {iteration}: the verified log of {sid} changed"
            );
        }
        // Every shown event is persisted, identical, in the shown order.
        let mut shown_count = 0;
        let positions: HashMap<&str, HashMap<&str, usize>> = listings
            .iter()
            .map(|(sid, log)| {
                let pos = log
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e["id"].as_str().unwrap(), i))
                    .collect();
                (sid.as_str(), pos)
            })
            .collect();
        for (sid, seq) in &m.shown {
            let log = &listings[sid];
            let pos = &positions[sid.as_str()];
            let mut last = None;
            for e in seq {
                shown_count += 1;
                let id = e["id"].as_str().expect("event id");
                let Some(&i) = pos.get(id) else {
                    panic!(
                        "iteration {iteration}: event {id} ({}) shown on {sid} is lost",
                        e["event_type"]
                    );
                };
                assert_eq!(&log[i], e, "shown event {id} differs from the stored one");
                assert!(
                    match last {
                        Some(l) => l < i,
                        None => true,
                    },
                    "iteration {iteration}: shown order of {id} on {sid} disagrees with the log"
                );
                last = Some(i);
            }
        }
        m.prev_listing = listings
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter()
                        .map(|e| e["id"].as_str().unwrap().to_string())
                        .collect(),
                )
            })
            .collect();
        let shown_sequences = m.shown.len();
        drop(m);
        eprintln!(
            "iteration {iteration}: {} sessions, {} events listed, {shown_count} shown events in {shown_sequences} sequences verified",
            sessions.len(),
            owner_of.len()
        );
        self.verify_turns(&listings);
    }

    /// Registrations survived, and every open session takes a turn
    /// (resuming or retiring a recovered pause), in parallel.
    fn verify_turns(&mut self, listings: &HashMap<String, Vec<Value>>) {
        let sessions: Vec<SessRec> = lock(self.model).sessions.clone();
        let mut jobs = Vec::new();
        for s in sessions.iter().filter(|s| !s.closed) {
            let m = lock(self.model);
            let active: Vec<Participant> = s
                .parts
                .iter()
                .filter(|p| m.key_ok(&p.key_id))
                .cloned()
                .collect();
            drop(m);
            let Some(any) = active.first() else { continue };
            // Registrations: kept with BAE_DURABLE_DRIVERS, otherwise gone
            // after a restart (spec 01 §4.3, §6.2) and made again here.
            let drivers = get_json(
                &self.client().bearer(any.session_key.clone()),
                &format!("/api/v1/sessions/{}/participants", s.id),
            );
            let listed: Vec<&str> = drivers["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            if self.durable_drivers {
                for p in s.parts.iter().filter(|p| p.registered) {
                    assert!(
                        listed.contains(&p.key_id.as_str()),
                        "registration of {} on {} lost: {listed:?}",
                        p.key_id,
                        s.id
                    );
                }
            } else {
                assert!(
                    listed.is_empty(),
                    "{}: drivers after a restart: {listed:?}",
                    s.id
                );
                for p in active.iter().filter(|p| p.registered) {
                    let out = rpc(
                        &self.client(),
                        &s.id,
                        &p.session_key,
                        "session.registerDriver",
                        json!({}),
                    );
                    assert_eq!(
                        out.result(),
                        Some(&json!({"registered": true})),
                        "re-registering {} on {}: {:?}",
                        p.key_id,
                        s.id,
                        out.terminal
                    );
                }
            }
            let registered: Vec<Participant> =
                active.iter().filter(|p| p.registered).cloned().collect();
            if registered.is_empty() {
                continue;
            }
            let log = &listings[&s.id];
            let plan = match (s.kind, paused_at_end(log)) {
                (Kind::Tools, Some((ids, owner))) => {
                    let others: Vec<&Participant> =
                        registered.iter().filter(|p| p.key_id != owner).collect();
                    let owner_part = registered.iter().find(|p| p.key_id == owner);
                    match (owner_part, others.is_empty()) {
                        (Some(o), true) => TurnPlan::Resume(o.clone(), ids),
                        (Some(o), false) if self.rng.percent(50) => {
                            TurnPlan::Resume(o.clone(), ids)
                        }
                        (_, false) => {
                            TurnPlan::Retire(others[self.rng.below(others.len())].clone(), owner)
                        }
                        (None, true) => continue,
                    }
                }
                (Kind::Tools, None) => TurnPlan::Start(registered[0].clone()),
                (Kind::Text, _) => {
                    TurnPlan::Plain(registered[self.rng.below(registered.len())].clone())
                }
            };
            jobs.push((s.id.clone(), plan));
        }
        // Every recovered pause is resumed or retired; of the other open
        // sessions a random sample takes a turn (bounds the run time).
        let (mut keep, mut rest): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .partition(|(_, p)| matches!(p, TurnPlan::Resume(..) | TurnPlan::Retire(..)));
        for _ in 0..VERIFY_TURNS.min(rest.len()) {
            let i = self.rng.below(rest.len());
            keep.push(rest.swap_remove(i));
        }
        let jobs = keep;
        let client = self.client();
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(sid, plan)| {
                let client = client.clone();
                thread::spawn(move || {
                    let out = plan.run(&client, &sid);
                    (sid, plan, out)
                })
            })
            .collect();
        for h in handles {
            let (sid, plan, out) = h.join().expect("verification turn panicked");
            let Some(result) = out.result() else {
                panic!(
                    "open session {sid} refused a turn ({plan:?}): {:?}",
                    out.terminal
                );
            };
            let evs = out.result_events();
            assert_eq!(evs[0]["event_type"], "client.message.send", "{sid}");
            match &plan {
                TurnPlan::Plain(_) => assert_eq!(text_of(&result["message"]), "ok", "{result}"),
                TurnPlan::Resume(_, ids) => {
                    let content = &evs[0]["payload"]["content"];
                    let answered: Vec<&str> = content
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|b| b["type"] == "tool_result")
                        .map(|b| b["tool_use_id"].as_str().unwrap())
                        .collect();
                    assert_eq!(answered, *ids, "resume of {sid}: {content}");
                    assert!(content.to_string().contains("42"));
                }
                TurnPlan::Retire(..) | TurnPlan::Start(_) => {}
            }
            let mut m = lock(self.model);
            m.record(&sid, out.notes.clone());
            m.record(&sid, evs.clone());
            m.turns += 1;
            match &plan {
                TurnPlan::Resume(..) => m.resumed += 1,
                TurnPlan::Retire(..) => m.retired += 1,
                _ => {}
            }
            if let TurnPlan::Retire(_, owner) = &plan {
                // The abandonment is logged (attributed to the owner) right
                // before the retiring request's events.
                drop(m);
                let (log, _) = all_pages(
                    &self.admin(),
                    &format!("/admin/v1/sessions/{sid}/events"),
                    200,
                );
                let first = evs[0]["id"].as_str().unwrap();
                let at = log.iter().position(|e| e["id"] == first).unwrap();
                let prev = &log[at - 1];
                assert_eq!(prev["event_type"], "session.error", "{sid}: {prev}");
                assert_eq!(
                    prev["payload"],
                    json!({"reason": "driver_turn_abandoned", "owner_client_key_id": owner})
                );
                assert_eq!(prev["client_key_id"], owner.as_str());
                m = lock(self.model);
            }
            let s = m.session_mut(&sid);
            if s.kind == Kind::Tools {
                // Whoever drove it last, the creator's belief is refreshed
                // from the log by the next workload's results.
                s.pause = match &plan {
                    TurnPlan::Resume(p, _) | TurnPlan::Start(p)
                        if p.key_id == s.parts[0].key_id =>
                    {
                        Some(tool_use_ids(&result["message"]))
                    }
                    _ => None,
                };
            }
        }
    }
}

#[derive(Debug, Clone)]
enum TurnPlan {
    /// A plain message on a text session.
    Plain(Participant),
    /// A plain message on a tools session that is not paused.
    Start(Participant),
    /// The owner answers the recovered pause's tool calls.
    Resume(Participant, Vec<String>),
    /// Another driver retires the owner's (expired) pause.
    Retire(Participant, String),
}

impl TurnPlan {
    fn run(&self, client: &HttpClient, sid: &str) -> Outcome {
        match self {
            TurnPlan::Plain(p) | TurnPlan::Start(p) | TurnPlan::Retire(p, _) => {
                send(client, sid, &p.session_key, json!("after restart"))
            }
            TurnPlan::Resume(p, ids) => send(client, sid, &p.session_key, tool_results(ids)),
        }
    }
}

// ---------------------------------------------------------------- test ---

#[test]
fn kill9_at_random_points_loses_nothing_acknowledged() {
    let started = Instant::now();
    let seed = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("crash_kill9: seed {seed} (set CRASH_SEED to replay the choices)");
    let mut rng = Rng(seed);

    let text = MockProvider::start();
    text.set_default(Reply::text("ok").delayed(Duration::from_millis(3)));
    let tools = MockProvider::start();
    tools.set_default(
        Reply::tool_use("tu_lookup", TOOL, json!({"q": "x"})).delayed(Duration::from_millis(3)),
    );
    let config = provider_toml(&[
        (
            "text",
            "anthropic",
            &text.base_url,
            "mock-model",
            "tok-text",
        ),
        (
            "tools",
            "anthropic",
            &tools.base_url,
            "mock-model",
            "tok-tools",
        ),
    ]);
    let durable_drivers = std::env::var("CRASH_DURABLE_DRIVERS").is_ok_and(|v| v == "1");
    let mut opts = ServerOptions::new()
        .bin(live_support::bin())
        .config(config)
        .env("BAE_TURN_TIMEOUT", "0");
    if durable_drivers {
        opts = opts.env("BAE_DURABLE_DRIVERS", "1");
    }
    eprintln!("crash_kill9: durable driver registrations: {durable_drivers}");
    let mut server = Server::start(opts);
    let admin_key = server.admin_key.clone();
    assert!(!admin_key.is_empty());

    let model: Shared = Arc::new(Mutex::new(Model::default()));
    let make_profile = |name: &str, primary: &str, tools: &[&str]| {
        let r = server.admin().post_json(
            "/admin/v1/profiles",
            &json!({"name": name, "primary_provider": primary, "allowed_tools": tools}),
        );
        r.assert_status(201);
        let id = r.json()["id"].as_str().unwrap().to_string();
        lock(&model).profiles.push(ProfileRec {
            id: id.clone(),
            name: name.to_string(),
        });
        id
    };
    let text_profile = make_profile("crash-text", "text", &[]);
    let tools_profile = make_profile("crash-tools", "tools", &[TOOL]);

    for iteration in 0..ITERATIONS {
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(Ctx {
            client: server.client().timeout(HTTP_TIMEOUT),
            admin: server.admin().timeout(HTTP_TIMEOUT),
            model: model.clone(),
            stop: stop.clone(),
            text_profile: text_profile.clone(),
            tools_profile: tools_profile.clone(),
        });
        let mut handles = Vec::new();
        for _ in 0..WORKERS {
            let (ctx, r) = (ctx.clone(), rng.fork());
            handles.push(thread::spawn(move || worker(ctx, r)));
        }
        for _ in 0..2 {
            let (ctx, r) = (ctx.clone(), rng.fork());
            handles.push(thread::spawn(move || observer(ctx, r)));
        }
        thread::sleep(Duration::from_millis(rng.between(60, 400)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect("workload thread panicked");
        }
        lock(&model).kills += 1;

        let t_restart = Instant::now();
        server.restart();
        let restart_time = t_restart.elapsed();
        assert_eq!(server.admin_key, admin_key, "the admin key changed");
        let mut verifier = Verifier {
            server: &server,
            model: &model,
            rng: rng.fork(),
            durable_drivers,
        };
        let t_verify = Instant::now();
        verifier.verify(iteration);
        eprintln!(
            "iteration {iteration}: restart {restart_time:?}, verification {:?}",
            t_verify.elapsed()
        );
    }

    let m = lock(&model);
    eprintln!(
        "crash_kill9: {} kills, {} sessions, {} keys, {} turns, {} joins, {} closes, \
         {} revocations, {} recovered pauses resumed, {} retired, {} shown sequences in {:?}",
        m.kills,
        m.sessions.len(),
        m.keys.len(),
        m.turns,
        m.joins,
        m.closes,
        m.revocations,
        m.resumed,
        m.retired,
        m.shown.len(),
        started.elapsed()
    );
    assert!(m.turns > ITERATIONS, "the workload did too little");
    assert!(
        m.resumed > 0 && m.retired > 0,
        "no recovered pause was resumed and retired"
    );
    assert!(
        m.sessions.iter().any(|s| s.kind == Kind::Tools),
        "no tools session"
    );
}
