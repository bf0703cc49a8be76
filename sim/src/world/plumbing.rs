//! Feeding the engine and draining its outputs; the simulated network
//! connections.

use super::driver::SimEvent;
use super::*;
use engine::driver::StoreDone;

impl World {
    // ---- engine plumbing ----------------------------------------------------

    /// An input from the network side, for the world's connection.
    pub(super) fn input(&mut self, input: Input) {
        self.event(SimEvent::Net(input));
    }

    pub(super) fn engine_panicked(&mut self, p: Box<dyn std::any::Any + Send>) {
        let text = panic_text(p);
        self.t(format!("ENGINE PANIC {text}"));
        self.checker
            .fail(check::INV_ENGINE_PANIC, format!("engine panicked: {text}"));
        self.dead_engine = true;
    }

    fn on_send(&mut self, conn: ConnId, bytes: engine::bytes::Bytes, gated: bool) {
        self.trace.hash.write_field(&bytes);
        let kind = if gated { "send" } else { "send-ungated" };
        self.t(format!("out {kind} conn={conn} len={}", bytes.len()));
        self.track_response_ends(conn, &bytes);
    }

    /// Checks one engine output (the core routed it: what it asks for
    /// comes as effects, `world/driver.rs`).
    pub(super) fn on_output(&mut self, o: Output) {
        match o {
            Output::Write(w) => self.on_write(w),
            Output::Send { conn, bytes } => self.on_send(conn, bytes, true),
            Output::SendUngated { conn, bytes } => self.on_send(conn, bytes, false),
            Output::Close { conn } => {
                self.t(format!("out close conn={conn}"));
                self.stream_end_emitted(conn, true);
            }
            Output::Read { id, read } => {
                self.t(format!("out read id={id} {read:?}"));
                if let (Some(rid), engine::StoreRead::LoadSession { .. }) = (self.feeding, &read) {
                    self.deferred.insert(id, rid);
                }
            }
            Output::CallProvider(call) => {
                self.stream.on_call(&call);
                (self.traffic).on_call_output(&call, self.now_ms, &mut self.checker);
            }
            Output::AbortProvider(call) => {
                self.t(format!("out abort provider call={}", call.0));
                self.traffic.on_abort(call, self.now_ms);
                // The engine gave up on it: the stream oracle expects
                // nothing more of it (the core closes it if it was sent).
                self.stream.abort(call);
            }
            // The simulator runs one server: replica mode is never on.
            Output::Forward(f) => self.t(format!("out forward conn={} (ignored)", f.conn)),
            Output::Sandbox(cmd) => self.t(format!("out sandbox {cmd:?}")),
            Output::Mcp(cmd) => {
                self.t(format!("out mcp {}", crate::mcp::describe_command(&cmd)));
            }
        }
    }

    pub(super) fn on_write(&mut self, w: StoreWrite) {
        if let StoreWrite::InsertEvent(row) = &w {
            self.t(format!(
                "out event seq={} {} {} key={} {}",
                row.seq,
                row.session_id,
                row.event_type,
                row.client_key_id.as_deref().unwrap_or("-"),
                row.payload
            ));
            self.checker.now_ms = self.now_ms;
            if self.transfer.copying.contains(&row.session_id) {
                // Copied history (a fork or an import), not a live turn:
                // the gate model follows it silently, and the MCP model
                // learns the session its transports will be opened for.
                self.checker.silent = true;
                self.checker.on_emit(row);
                self.checker.silent = false;
                if row.event_type == "session.open" {
                    self.mcp.on_event(row, self.now_ms, &mut self.checker);
                }
                self.transfer.copied_seqs.insert(row.seq);
                return;
            }
            self.checker.on_emit(row);
            self.mcp.on_event(row, self.now_ms, &mut self.checker);
            self.sandbox.on_event(row, self.now_ms, &mut self.checker);
            self.ext.on_emit(row, &mut self.checker);
            if let Err(e) = self.stream.on_emit(row) {
                self.checker.fail(crate::check::INV_STREAM_ORACLE, e);
            }
            (self.traffic).on_emit(row, self.now_ms, &mut self.checker);
            let row = row.clone();
            self.on_emit_fifo(&row);
        } else {
            self.t(format!("out write {}", write_name(&w)));
            if let StoreWrite::InsertLineage(l) = &w {
                self.transfer.copying.insert(l.session_id.clone());
            }
            self.checker.on_emit_write(&w);
        }
    }

    /// The core's writer for `conn` was handed bytes.
    pub(super) fn release_send(&mut self, conn: ConnId, bytes: engine::bytes::Bytes) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.client_closed || c.server_closed {
            return;
        }
        c.outbound.extend(bytes.iter());
        if !c.flush_scheduled {
            c.flush_scheduled = true;
            self.after(0, Ev::Flush(conn));
        }
    }

    /// The core's writer for `conn` was told to close (or the core refused
    /// the connection).
    pub(super) fn release_close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.server_closing = true;
        if !c.flush_scheduled {
            c.flush_scheduled = true;
            self.after(0, Ev::Flush(conn));
        }
    }

    pub(super) fn start_job(&mut self) {
        let lat = match self.running.front() {
            Some(Job::Commit { .. }) => self.swarm.commit_ms,
            Some(Job::Read { .. }) => self.swarm.read_ms,
            Some(Job::Activity) => (0, 0),
            None => return,
        };
        let d = self.draw(lat);
        self.job_scheduled = true;
        self.after(d, Ev::JobDone);
    }

    pub(super) fn job_done(&mut self) {
        self.job_scheduled = false;
        let Some(job) = self.running.pop_front() else {
            return;
        };
        match job {
            Job::Commit { batch, writes, .. } => {
                self.commit(batch, writes);
                self.event(SimEvent::Store(StoreDone::Committed(batch)));
            }
            Job::Activity => {}
            Job::Read { id, read } => {
                // Read failures are not fatal in the driver: they reach the
                // engine as `Err` (commit failures are crashes instead).
                let result = if self.rng.chance(self.swarm.read_error) {
                    self.t(format!("store read id={id} FAILED"));
                    Err(engine::ReadError::Store(
                        "simulated read failure".to_string(),
                    ))
                } else {
                    self.t(format!("store read id={id} answered"));
                    Ok(self.store.read(&read))
                };
                self.mcp.set_context(crate::mcp::read_session(&read));
                // A request set aside for this load is handled now: what
                // the checks take as its handling time moves here.
                let deferred = self.deferred.remove(&id);
                if let Some(rid) = deferred {
                    match self.reqs[rid].kind {
                        Kind::Cancel => self.cancel_probe = Some(rid),
                        Kind::Subscribe { .. } => self.ext_before_subscribe(rid),
                        _ => {}
                    }
                }
                self.event(SimEvent::Store(StoreDone::Read(id, result)));
                self.cancel_probe = None;
            }
        }
        if !self.job_scheduled {
            self.start_job();
        }
    }

    pub(super) fn commit(&mut self, batch: u64, writes: Vec<StoreWrite>) {
        self.t(format!(
            "store commit batch={batch} writes={}",
            writes.len()
        ));
        for w in &writes {
            if let StoreWrite::InsertEvent(row) = w {
                if !self.checker.on_commit_event(row) {
                    continue;
                }
                if !self.transfer.copied_seqs.contains(&row.seq) {
                    self.ext.on_commit(row, &mut self.checker);
                }
            }
            self.store.apply(w);
        }
    }

    /// A streamed call answers in chunks (`sim/src/stream.rs`).
    fn stream_provider(&mut self, call: ProviderCall, latency: u64, reply: ProviderReply) {
        let plan = self.stream.plan(&call, reply, latency, &self.swarm.stream);
        self.t(format!(
            "out call id={} {} streamed: {} chunks",
            call.id,
            call.url,
            plan.chunks.len()
        ));
        let mut at = 0;
        for (delay, bytes) in plan.chunks {
            at += delay;
            self.after(
                at,
                Ev::ProviderChunk {
                    call: call.id,
                    bytes,
                },
            );
        }
        if let Some((delay, reply)) = plan.end {
            self.after(
                at + delay,
                Ev::Provider {
                    call: call.id,
                    reply,
                },
            );
        }
    }

    /// The core closed a streamed call the engine gave up on: what was
    /// still to come of it is gone, and its task reports the closed
    /// connection (the core drops that report).
    pub(super) fn abort_provider(&mut self, call: engine::CallId) {
        self.stats.provider_aborts += 1;
        self.queue.retain(|_, ev| {
            !matches!(ev, Ev::Provider { call: c, .. } | Ev::ProviderChunk { call: c, .. } if *c == call)
        });
        let reply = ProviderReply::Transport("closed by the driver".into());
        self.after(0, Ev::Provider { call, reply });
    }

    pub(super) fn call_provider(&mut self, call: ProviderCall) {
        self.stats.provider_calls += 1;
        crate::ext::check_provider_body(call.id.0, &call.body, &mut self.checker);
        let (mut delay, mut reply) = self.provider.answer(&call, &self.swarm);
        let unix = self.unix0 + self.now_ms;
        (self.traffic).on_dispatch(&call, unix, &mut delay, &mut reply, &self.swarm.traffic);
        if call.stream {
            return self.stream_provider(call, delay, reply);
        }
        self.t(format!(
            "out call id={} {} -> in {delay}ms {}",
            call.id,
            call.url,
            crate::provider::describe(&reply)
        ));
        self.after(
            delay,
            Ev::Provider {
                call: call.id,
                reply,
            },
        );
    }

    // ---- connections ----------------------------------------------------------

    /// Opens a connection and queues the request bytes (possibly split).
    pub(super) fn start_req(
        &mut self,
        actor: usize,
        slot: usize,
        session: &str,
        kind: Kind,
        listener: Listener,
        bytes: Vec<u8>,
    ) -> usize {
        let conn = self.next_conn;
        self.next_conn += 1;
        let rid = self.reqs.len();
        self.stats.requests += 1;
        let slow = actor != usize::MAX && self.actors[actor].slow;
        self.t(format!(
            "req #{rid} conn={conn} actor={} {kind:?} {}",
            self.actor_name(actor),
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                .split("\r\n")
                .next()
                .unwrap_or("")
        ));
        if let Kind::Send { nonce, .. } = &kind {
            // A retry repeats its message's nonce: the first one keeps it.
            self.nonces.entry(nonce.clone()).or_insert(rid);
        }
        self.reqs.push(Req {
            actor,
            slot,
            session: session.to_string(),
            conn,
            epoch: self.epoch,
            kind,
            status: None,
            terminal: None,
            body: None,
            done: false,
            lost: false,
            arrival: None,
            bypass_ok: false,
            waiting: false,
            admitted: false,
            last_seq: None,
            expect_after: None,
            frames: 0,
            started_ms: self.now_ms,
            notified: Vec::new(),
            end_emitted: false,
            arrive_later: false,
            ext: Default::default(),
        });
        let calm = self.phase == Phase::Setup;
        let keep_alive = std::mem::take(&mut self.force_keep_alive)
            || (!calm
                && actor != usize::MAX
                && listener == Listener::Client
                && self.rng.chance(self.swarm.keep_alive));
        let bytes = if keep_alive {
            strip_close(bytes)
        } else {
            bytes
        };
        let mut pieces: VecDeque<(Vec<u8>, Option<usize>)> = VecDeque::new();
        if !calm && bytes.len() > 1 && self.rng.chance(self.swarm.split_bytes) {
            let mut cuts: Vec<usize> = (0..self.rng.range(1, 3))
                .map(|_| self.rng.range(1, bytes.len() as u64 - 1) as usize)
                .collect();
            cuts.sort();
            cuts.dedup();
            let mut prev = 0;
            for c in cuts {
                pieces.push_back((bytes[prev..c].to_vec(), None));
                prev = c;
            }
            pieces.push_back((bytes[prev..].to_vec(), Some(rid)));
        } else {
            pieces.push_back((bytes, Some(rid)));
        }
        // Reuse the actor's idle keep-alive connection, or pipeline behind
        // the one given by `pipeline_on`.
        let reuse = if let Some(c) = self.pipeline_on.take() {
            Some(c)
        } else if keep_alive {
            self.actors[actor].idle_conn.take().filter(|c| {
                self.conns.get(c).is_some_and(|c| {
                    c.idle && !c.client_closed && !c.server_closing && !c.server_closed
                })
            })
        } else {
            None
        };
        if let Some(conn) = reuse {
            self.reqs[rid].conn = conn;
            self.t(format!("req #{rid} reuses conn={conn}"));
            let c = self.conns.get_mut(&conn).expect("checked");
            let deliver_chain_idle = c.to_send.is_empty();
            if c.idle {
                c.idle = false;
                c.req = rid;
                c.engine_pos = c.all.len();
            } else {
                c.pending.push_back(rid);
            }
            c.all.push(rid);
            c.to_send.extend(pieces);
            if deliver_chain_idle {
                let d = self.draw(self.swarm.net_delay_ms);
                self.after(d, Ev::Deliver(conn));
            }
            return rid;
        }
        self.conns.insert(
            conn,
            SimConn {
                req: rid,
                all: vec![rid],
                to_send: pieces,
                slow,
                shadow: ResponseReader::framing_only(),
                ..Default::default()
            },
        );
        self.event(SimEvent::Accepted(listener, conn));
        let d = if calm {
            0
        } else {
            self.draw(self.swarm.net_delay_ms)
        };
        self.after(d, Ev::Deliver(conn));
        rid
    }

    pub(super) fn on_deliver(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.client_closed || c.server_closed {
            return;
        }
        let Some((piece, completes)) = c.to_send.pop_front() else {
            return;
        };
        let more = !c.to_send.is_empty();
        let behind = completes.is_some_and(|rid| c.all.get(c.engine_pos) != Some(&rid));
        if let (true, Some(rid)) = (behind, completes) {
            self.reqs[rid].arrive_later = true;
        } else if let Some(rid) = completes {
            self.before_arrival(rid);
            match self.reqs[rid].kind {
                Kind::Cancel => self.cancel_probe = Some(rid),
                Kind::Subscribe { .. } => self.ext_before_subscribe(rid),
                _ => {}
            }
        }
        self.t(format!(
            "in recv conn={conn} len={} completes={completes:?}",
            piece.len()
        ));
        self.feeding = completes;
        if let Some(conn) = self.core_conn(conn) {
            self.input(Input::Received { conn, bytes: piece });
        }
        self.feeding = None;
        self.cancel_probe = None;
        if let Some(rid) = completes.filter(|_| !behind) {
            self.after_arrival(rid);
        }
        if more {
            let d = self.draw(self.swarm.net_delay_ms);
            self.after(d, Ev::Deliver(conn));
        }
    }

    pub(super) fn on_flush(&mut self, conn: ConnId) {
        let sockbuf = self.swarm.sockbuf;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.flush_scheduled = false;
        if c.client_closed {
            return;
        }
        let room = sockbuf.saturating_sub(c.wire.len());
        let n = room.min(c.outbound.len());
        let moved = take_front(&mut c.outbound, n);
        c.wire.extend(moved.iter());
        let finish_close = c.outbound.is_empty() && c.server_closing && !c.server_closed;
        if finish_close {
            c.server_closed = true;
        }
        let need_read = (!c.wire.is_empty() || c.server_closed) && !c.read_scheduled;
        if need_read {
            c.read_scheduled = true;
        }
        if n > 0 {
            let d = self.draw(self.swarm.flush_delay_ms);
            self.after(d, Ev::Flushed { conn, bytes: n });
        }
        if need_read {
            let d = self.draw(self.swarm.net_delay_ms);
            self.after(d, Ev::ClientRead(conn));
        }
        if finish_close {
            self.after(0, Ev::EngineClosed(conn));
        }
    }

    pub(super) fn on_client_read(&mut self, conn: ConnId) {
        let split = self.swarm.split_bytes;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.read_scheduled = false;
        if c.client_closed {
            return;
        }
        if c.stalled_until > self.now_ms {
            // Not reading: the socket buffer fills and flushes stop.
            c.read_scheduled = true;
            let at = c.stalled_until;
            self.schedule(at, Ev::ClientRead(conn));
            return;
        }
        let avail = c.wire.len();
        let slow = c.slow;
        let n = if avail == 0 {
            0
        } else if slow {
            self.rng.range(1, 1_500).min(avail as u64) as usize
        } else if self.rng.chance(split) {
            self.rng.range(1, avail as u64) as usize
        } else {
            avail
        };
        let c = self.conns.get_mut(&conn).expect("conn");
        let mut bytes = take_front(&mut c.wire, n);
        let more = !c.wire.is_empty();
        let eof = c.wire.is_empty() && c.server_closed;
        let refill = !c.outbound.is_empty() && !c.flush_scheduled;
        if refill {
            c.flush_scheduled = true;
        }
        while let Some(c) = self.conns.get_mut(&conn) {
            let mut parsed = Vec::new();
            c.reader.feed(&bytes, &mut parsed);
            let rid = c.req;
            for p in parsed {
                self.on_parsed(rid, p);
            }
            // A complete response: the next pipelined one starts with
            // whatever bytes are left.
            let Some(c) = self.conns.get_mut(&conn) else {
                break;
            };
            if !c.reader.is_done() {
                break;
            }
            bytes = c.reader.take_rest();
            match c.pending.pop_front() {
                Some(next) => {
                    c.req = next;
                    c.reader = ResponseReader::default();
                }
                None => {
                    c.idle = true;
                    let owner = self.reqs[rid].actor;
                    if !bytes.is_empty() {
                        self.checker.fail(
                            check::INV_WIRE_WELL_FORMED,
                            format!("conn {conn}: {} bytes after the last response", bytes.len()),
                        );
                    } else if owner != usize::MAX && !c.server_closing {
                        c.reader = ResponseReader::default();
                        self.actors[owner].idle_conn = Some(conn);
                    }
                    break;
                }
            }
        }
        let rid = self.conns.get(&conn).map(|c| c.req).unwrap_or(0);
        if refill {
            self.after(0, Ev::Flush(conn));
        }
        if more {
            let d = if slow {
                self.rng.range(20, 400)
            } else {
                self.rng.range(0, 2)
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                if !c.read_scheduled {
                    c.read_scheduled = true;
                    self.after(d, Ev::ClientRead(conn));
                }
            }
        } else if eof {
            self.finish_req(rid, false);
            let pending: Vec<usize> = self
                .conns
                .get_mut(&conn)
                .map(|c| c.pending.drain(..).collect())
                .unwrap_or_default();
            for r in pending {
                self.finish_req(r, false);
            }
        }
    }

    pub(super) fn client_close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.client_closed || c.server_closed {
            return;
        }
        c.client_closed = true;
        c.outbound.clear();
        c.wire.clear();
        c.to_send.clear();
        let rid = c.req;
        let pending: Vec<usize> = c.pending.drain(..).collect();
        self.t(format!("client closes conn={conn} (req #{rid})"));
        self.finish_req(rid, true);
        for r in pending {
            self.finish_req(r, true);
        }
        let d = self.draw(self.swarm.net_delay_ms);
        self.after(d, Ev::EngineClosed(conn));
    }

    pub(super) fn engine_closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.engine_told_closed {
            return;
        }
        c.engine_told_closed = true;
        let all = c.all.clone();
        for r in &all {
            self.reqs[*r].waiting = false;
        }
        self.t(format!("in closed conn={conn}"));
        if let Some(conn) = self.core_conn(conn) {
            self.input(Input::Closed { conn });
        }
        // Forget fully finished connections.
        let finished = all.iter().all(|r| self.reqs[*r].done || self.reqs[*r].lost);
        if let Some(c) = self.conns.get(&conn) {
            if c.wire.is_empty() && (c.client_closed || finished) {
                self.conns.remove(&conn);
            }
        }
    }

    /// Follows the engine's output on `conn` with a framing-only reader to
    /// learn exactly when each response ends (whatever its framing).
    pub(super) fn track_response_ends(&mut self, conn: ConnId, bytes: &[u8]) {
        let mut ends = 0;
        if let Some(c) = self.conns.get_mut(&conn) {
            let mut input = bytes.to_vec();
            loop {
                let mut out = Vec::new();
                c.shadow.feed(&input, &mut out);
                if !c.shadow.is_done() {
                    break;
                }
                ends += 1;
                input = c.shadow.take_rest();
                c.shadow = ResponseReader::framing_only();
                if input.is_empty() {
                    break;
                }
            }
        }
        for _ in 0..ends {
            self.stream_end_emitted(conn, false);
        }
    }

    /// The engine finished answering the request it is on (`close`: and
    /// will answer none after it).
    pub(super) fn stream_end_emitted(&mut self, conn: ConnId, close: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let ended: Vec<usize> = if close {
            c.close_emitted = true;
            c.all[c.engine_pos.min(c.all.len())..].to_vec()
        } else {
            let r = c.all.get(c.engine_pos).copied();
            c.engine_pos += 1;
            // A pipelined request the engine gets to now arrives now.
            if let Some(&next) = c.all.get(c.engine_pos) {
                if std::mem::take(&mut self.reqs[next].arrive_later) {
                    self.before_arrival(next);
                    let r = &mut self.reqs[next];
                    r.waiting |= r.arrival.is_some() && !r.admitted && !r.end_emitted;
                }
            }
            r.into_iter().collect()
        };
        for r in ended {
            self.reqs[r].end_emitted = true;
            self.reqs[r].waiting = false;
            let by_close = self.ext.closes_in_drain.contains(&self.reqs[r].session);
            self.reqs[r].ext.ended_by_close = by_close;
        }
    }
}
