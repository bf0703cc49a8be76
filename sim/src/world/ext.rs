//! The opt-in extensions in the workload (docs/extensions.md): drivers that
//! register with `extensions` and then cancel, steer and retry idempotent
//! sends from the side while their own request runs; subscribers that opt
//! into `subscribe.gapless` and stall; and the checks of what they get back.
//!
//! Every decision is drawn from the world's extension generator (`xrng`),
//! and nothing here runs when the seed's `ext` options are off, so such a
//! seed draws what it drew before the extensions were simulated.

use proto::jsonrpc::{Extension, Extensions};

use super::*;
use crate::ext::{IdemId, Member, SteerTrack};

/// A request an actor sends beside its own (`busy`) one.
#[derive(Debug, Clone)]
pub(super) enum Side {
    Cancel,
    Steer,
    /// The keyed `sendMessage` of that request again, same message.
    Retry(usize),
    /// Its key with a different message.
    Reuse(usize),
}

/// A keyed `sendMessage`: what a retry repeats.
#[derive(Debug, Clone)]
pub(super) struct IdemSend {
    pub id: IdemId,
    pub nonce: String,
    pub content: Value,
    pub continuation: bool,
    /// Main-request resends so far (after a loss).
    pub attempts: u32,
}

/// Extension state of one request.
#[derive(Debug, Clone, Default)]
pub(super) struct ReqExt {
    /// Sent beside the actor's own request (its answer changes nothing of
    /// the actor's state).
    pub side: bool,
    /// Extensions the stream may have (a registration may be in flight).
    pub may: Extensions,
    /// Extensions it surely has: registered with them in this engine
    /// incarnation, on this session.
    pub sure: Extensions,
    pub idem: Option<IdemSend>,
    /// `session.subscribe` with `subscribe.gapless` / `replay_complete`.
    pub gapless: bool,
    pub marker_asked: bool,
    pub markers: u32,
    /// The stream ended in the drain that closed its session.
    pub ended_by_close: bool,
    pub replay_failed: bool,
    /// The actor's own cancel of its parked pause.
    pub pause_cancel: bool,
    pub saw_event: bool,
    pub last_event_id: Option<String>,
    /// A retry was sent when it was told its queue position.
    pub queue_retried: bool,
}

/// Extension state of one actor.
#[derive(Debug, Clone, Default)]
pub(super) struct ActorExt {
    /// `(session, set)`: chosen at the first registration on a session
    /// (empty: registers without the param).
    pub plan: Option<(String, Extensions)>,
    /// `(epoch, session)` of the last registration answered with the plan.
    pub live: Option<(u32, String)>,
    /// A keyed send lost before its answer, to send again.
    pub retry: Option<IdemSend>,
    pub keys: u64,
}

/// What a driver may opt into, in the documented order.
/// The extensions drawn by the extension generator (`turn.deltas` is the
/// stream generator's, `sim/src/stream.rs`, so older seeds draw as before).
const NAMES: [Extension; 6] = [
    Extension::TurnCancel,
    Extension::TurnQueue,
    Extension::TurnSteer,
    Extension::SendIdempotent,
    Extension::SubscribeGapless,
    Extension::ReplayComplete,
];

impl World {
    pub(super) fn ext_on(&self) -> bool {
        self.swarm.ext.opt_in > 0.0
    }

    pub(super) fn plan_of(&self, a: usize) -> Extensions {
        match (&self.actors[a].ext.plan, &self.actors[a].joined) {
            (Some((s, set)), Some(j)) if s == j => *set,
            _ => Extensions::default(),
        }
    }

    /// What the engine surely has for the actor's streams.
    fn ext_sure(&self, a: usize) -> Extensions {
        let actor = &self.actors[a];
        match (&actor.ext.live, &actor.joined) {
            (Some((e, s)), Some(j)) if *e == self.epoch && s == j => self.plan_of(a),
            _ => Extensions::default(),
        }
    }

    /// Tags a new request of actor `a` with what its stream may have.
    pub(super) fn ext_tag(&mut self, a: usize, rid: usize) {
        if !self.ext_on() {
            return;
        }
        let sure = self.ext_sure(a);
        let registering = self.actors[a]
            .busy
            .is_some_and(|b| self.reqs[b].kind == Kind::Register && !self.reqs[b].done);
        let may = if registering {
            sure.union(self.plan_of(a))
        } else {
            sure
        };
        let e = &mut self.reqs[rid].ext;
        e.sure = sure;
        e.may = may;
    }

    /// `registerDriver` params: the actor's plan for this session, drawn
    /// the first time it registers on it.
    pub(super) fn ext_register_params(&mut self, a: usize) -> Option<Value> {
        if !self.ext_on() {
            return None;
        }
        let joined = self.actors[a].joined.clone()?;
        if self.actors[a].ext.plan.as_ref().map(|p| &p.0) != Some(&joined) {
            let mut set = Extensions::default();
            if self.xrng.chance(self.swarm.ext.opt_in) {
                for e in NAMES {
                    if self.xrng.chance(0.7) {
                        set = set.with(e);
                    }
                }
                if set.is_empty() {
                    set = set.with(Extension::TurnCancel);
                }
                if self.stream.opt_in(&self.swarm.stream) {
                    set = set.with(Extension::TurnDeltas);
                }
            }
            self.actors[a].ext.plan = Some((joined, set));
        }
        let set = self.plan_of(a);
        if set.is_empty() {
            return None;
        }
        let mut names: Vec<&str> = set.names();
        if self.xrng.chance(0.2) {
            // Unknown names are ignored (a client may ask for more).
            names.insert(0, "future.extension");
        }
        Some(json!({ "extensions": names }))
    }

    /// A registration with the plan is needed: none in this incarnation.
    pub(super) fn ext_needs_register(&self, a: usize) -> bool {
        self.ext_on()
            && !self.plan_of(a).is_empty()
            && self.ext_sure(a).is_empty()
            && self.actors[a].registered
    }

    // ---- sends ------------------------------------------------------------------

    /// Whether the next send carries an idempotency key (only when the
    /// engine surely has `send.idempotent`: otherwise it ignores the key).
    pub(super) fn ext_key(
        &mut self,
        a: usize,
        nonce: &str,
        content: &Value,
        continuation: bool,
    ) -> Option<IdemSend> {
        if !self.ext_on() || !self.ext_sure(a).has(Extension::SendIdempotent) {
            return None;
        }
        if !self.xrng.chance(self.swarm.ext.idem) {
            return None;
        }
        self.actors[a].ext.keys += 1;
        let actor = &self.actors[a];
        let key = format!("key-a{a}-{}", actor.ext.keys);
        let sid = actor.joined.clone().unwrap_or_default();
        Some(IdemSend {
            id: (sid, actor.key_id.clone(), key),
            nonce: nonce.to_string(),
            content: content.clone(),
            continuation,
            attempts: 0,
        })
    }

    /// `sendMessage` params of a keyed send.
    fn keyed_params(i: &IdemSend) -> Value {
        json!({"message": {"role": "user", "content": i.content}, "idempotency_key": i.id.2})
    }

    /// A send went out: registers it with its key's group and schedules
    /// the side requests that race it.
    pub(super) fn ext_sent(&mut self, a: usize, rid: usize, idem: Option<IdemSend>) {
        if !self.ext_on() {
            return;
        }
        if let Some(i) = idem {
            self.ext_join_group(rid, &i);
            self.reqs[rid].ext.idem = Some(i);
            self.ext.stats.keyed_sends += 1;
        }
        if self.phase != Phase::Main {
            return;
        }
        let sw = self.swarm.ext.clone();
        let sure = self.reqs[rid].ext.sure;
        let sid = self.reqs[rid].session.clone();
        let lat = self.swarm.provider_latency_ms.1;
        let cancel = if sure.has(Extension::TurnCancel) {
            sw.cancel
        } else {
            // The reference answer (-32601) for a driver without it.
            sw.cancel / 20.0
        };
        if self.xrng.chance(cancel) {
            let d = if self.xrng.chance(0.5) {
                self.xrng.range(1, 40)
            } else {
                self.xrng.range(1, lat + 50)
            };
            self.after_side(d, a, &sid, Side::Cancel);
        }
        if sure.has(Extension::TurnSteer) && self.xrng.chance(sw.steer) {
            let d = self.xrng.range(1, lat + 50);
            self.after_side(d, a, &sid, Side::Steer);
        }
        if self.reqs[rid].ext.idem.is_some() {
            // Another driver holds the gate, so this send will wait: an
            // impatient client retries soon (the retry must join it).
            let key = &self.actors[a].key_id;
            let behind = match self.checker.gates.get(&sid) {
                Some(check::Gate::Running { key: k })
                | Some(check::Gate::Paused { key: k, .. })
                | Some(check::Gate::Compacting { key: k }) => k != key,
                _ => false,
            };
            if behind && self.xrng.chance(sw.retry.max(0.5)) {
                let d = self.xrng.range(1, 20);
                self.after_side(d, a, &sid, Side::Retry(rid));
            } else if self.xrng.chance(sw.retry) {
                let d = self.xrng.range(0, lat + 50);
                self.after_side(d, a, &sid, Side::Retry(rid));
            }
            if self.xrng.chance(sw.reuse) {
                let d = self.xrng.range(0, 100);
                self.after_side(d, a, &sid, Side::Reuse(rid));
            }
        }
    }

    fn ext_join_group(&mut self, rid: usize, i: &IdemSend) {
        let g = self.ext.groups.entry(i.id.clone()).or_default();
        g.members.push(Member {
            rid,
            nonce: i.nonce.clone(),
        });
        self.ext.nonce_group.insert(i.nonce.clone(), i.id.clone());
    }

    pub(super) fn after_side(&mut self, delay: u64, actor: usize, session: &str, what: Side) {
        let ev = Ev::Side {
            actor,
            session: session.to_string(),
            what,
        };
        self.after(delay, ev);
    }

    /// A side request is due.
    pub(super) fn on_side(&mut self, a: usize, session: String, what: Side) {
        let actor = &self.actors[a];
        if actor.gone || self.dead_engine || actor.joined.as_deref() != Some(session.as_str()) {
            return;
        }
        let rid = match what {
            Side::Cancel => self.rpc(
                a,
                Kind::Cancel,
                "session.cancelTurn",
                Some(json!({})),
                false,
            ),
            Side::Steer => {
                let nonce = self.next_nonce(a);
                let r = self.xrng.unit();
                let invalid = r < 0.06;
                let message = if r < 0.03 {
                    json!({"role": "assistant", "content": format!("steer {nonce}")})
                } else if invalid {
                    json!({"content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": format!("steer {nonce}")}]})
                } else if r < 0.5 {
                    json!({"role": "user", "content": format!("steer {nonce} please")})
                } else {
                    json!({"content": [{"type": "text", "text": format!("steer {nonce}")}]})
                };
                let kind = Kind::Steer {
                    nonce: nonce.clone(),
                    invalid,
                };
                let rid = self.rpc(
                    a,
                    kind,
                    "session.steerTurn",
                    Some(json!({ "message": message })),
                    false,
                );
                if let Some(rid) = rid {
                    let track = SteerTrack {
                        rid,
                        session: session.clone(),
                        ..SteerTrack::default()
                    };
                    self.checker.steer_nonces.insert(nonce.clone());
                    self.ext.steers.insert(nonce, track);
                }
                rid
            }
            Side::Retry(orig) => {
                let Some(i) = self.reqs[orig].ext.idem.clone() else {
                    return;
                };
                self.ext.stats.retries += 1;
                self.send_keyed(a, i)
            }
            Side::Reuse(orig) => {
                let Some(mut i) = self.reqs[orig].ext.idem.clone() else {
                    return;
                };
                i.nonce = self.next_nonce(a);
                i.content = json!(format!("other message {} with a used key", i.nonce));
                i.continuation = false;
                self.send_keyed(a, i)
            }
        };
        if let Some(rid) = rid {
            self.reqs[rid].ext.side = true;
        }
    }

    /// Sends a keyed message (a retry or a reuse of a key).
    fn send_keyed(&mut self, a: usize, i: IdemSend) -> Option<usize> {
        let kind = Kind::Send {
            nonce: i.nonce.clone(),
            continuation: i.continuation,
        };
        let params = Self::keyed_params(&i);
        let rid = self.rpc(a, kind, "session.sendMessage", Some(params), false)?;
        self.ext_join_group(rid, &i);
        self.reqs[rid].ext.idem = Some(i);
        Some(rid)
    }

    /// Driver actions of the extensions: a lost keyed send is sent again
    /// (same key, same message). `true` when it acted.
    pub(super) fn ext_driver_act(&mut self, a: usize) -> bool {
        let Some(i) = self.actors[a].ext.retry.take() else {
            return false;
        };
        if self.phase == Phase::Liveness || self.actors[a].joined.as_ref() != Some(&i.id.0) {
            return false;
        }
        if !self.ext_sure(a).has(Extension::SendIdempotent) {
            // The key would be ignored: register again first.
            self.actors[a].ext.retry = Some(i);
            return false;
        }
        self.t(format!(
            "{} sends its lost keyed message {} again",
            self.actors[a].name, i.id.2
        ));
        self.ext.stats.retries += 1;
        let rid = self.send_keyed(a, i);
        self.actors[a].busy = rid;
        rid.is_some()
    }

    /// Instead of answering its parked pause, the driver cancels it.
    pub(super) fn ext_cancel_pause(&mut self, a: usize) -> bool {
        if self.phase != Phase::Main
            || !self.ext_sure(a).has(Extension::TurnCancel)
            || !self.xrng.chance(self.swarm.ext.cancel_pause)
        {
            return false;
        }
        let rid = self.rpc(a, Kind::Cancel, "session.cancelTurn", None, false);
        if let Some(rid) = rid {
            self.reqs[rid].ext.pause_cancel = true;
        }
        self.actors[a].busy = rid;
        rid.is_some()
    }
}
