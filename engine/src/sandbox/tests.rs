//! The sandbox hub and its per-session boxes in isolation: typed requests
//! and driver replies in, commands and notices out, virtual time. No
//! HTTP, no store.

use crate::ids::SessionId;
use serde_json::Value;

use super::*;

type Map = std::collections::BTreeMap<SessionId, SessionSandbox>;

impl Boxes for Map {
    fn sandbox(&mut self, session_id: &SessionId) -> Option<&mut SessionSandbox> {
        self.get_mut(session_id)
    }
}

/// The hub with the boxes it routes to, held by session id as the
/// engine's sessions table holds them.
struct Hub {
    hub: SandboxHub,
    boxes: Map,
}

impl Hub {
    fn start(&mut self, id: &SessionId, image: &str, r: Requester) -> Result<(), StartRefused> {
        let b = (self.boxes.entry(id.clone())).or_insert_with(|| SessionSandbox::new(id.clone()));
        b.start(&mut self.hub, image, r)
    }

    fn stop(&mut self, id: &SessionId, r: Requester, reason: StopReason) -> Option<Handle> {
        self.boxes.get_mut(id)?.stop(&mut self.hub, r, reason)
    }

    fn exec(&mut self, id: &SessionId, command: &str, r: Requester, now: MonoMs) -> Option<String> {
        self.boxes.get_mut(id)?.exec(&mut self.hub, command, r, now)
    }

    fn launch(&mut self, id: &SessionId, spec: LaunchSpec, now: MonoMs) -> Option<SubagentStatus> {
        self.boxes.get_mut(id)?.launch(&mut self.hub, spec, now)
    }

    fn cancel(&mut self, id: &SessionId, sub: &str) -> CancelOutcome {
        (self.boxes.get_mut(id)).map_or(CancelOutcome::NotFound, |b| b.cancel(&mut self.hub, sub))
    }

    fn report(&mut self, id: &str, sub: Option<&str>) -> Option<Vec<Value>> {
        match self.boxes.get_mut(id) {
            Some(b) => b.report(sub),
            None => sub.is_none().then(Vec::new),
        }
    }

    fn close_session(
        &mut self,
        id: &SessionId,
        creator: &str,
    ) -> (Vec<SubagentStatus>, Option<Handle>) {
        match self.boxes.remove(id) {
            Some(b) => b.close(&mut self.hub, creator),
            None => (Vec::new(), None),
        }
    }

    fn handle(&self, id: &str) -> Option<&Handle> {
        self.boxes.get(id)?.handle()
    }

    fn running_subagents(&self, id: &str) -> usize {
        self.boxes
            .get(id)
            .map_or(0, SessionSandbox::running_subagents)
    }

    fn tracks_subagents(&self, id: &str) -> bool {
        self.boxes
            .get(id)
            .is_some_and(SessionSandbox::tracks_subagents)
    }

    fn handle_reply(&mut self, op: OpId, reply: SandboxReply, now: MonoMs) {
        self.hub.handle_reply(op, reply, now, &mut self.boxes);
    }

    fn handle_timeout(&mut self, now: MonoMs) {
        self.hub.handle_timeout(now, &mut self.boxes);
    }

    fn poll_timeout(&self) -> Option<MonoMs> {
        self.hub.poll_timeout()
    }

    fn poll_command(&mut self) -> Option<SandboxCommand> {
        self.hub.poll_command()
    }

    fn poll_notice(&mut self) -> Option<SandboxNotice> {
        self.hub.poll_notice()
    }

    fn provision(&mut self, profile_id: &str, images: &[String]) {
        self.hub.provision(profile_id, images)
    }

    fn image_state(&self, profile_id: &str, image: &str) -> ImageState {
        self.hub.image_state(profile_id, image)
    }

    fn image_json(&self, profile_id: &str, image: &str) -> Value {
        self.hub.image_json(profile_id, image)
    }

    fn cmds_empty(&self) -> bool {
        self.hub.commands.is_empty()
    }
}

fn hub() -> Hub {
    Hub {
        hub: SandboxHub::new(SandboxSettings {
            exec_timeout_ms: 1_000,
            max_output: 1 << 20,
            subagent_timeout_ms: 5_000,
            labels: vec![("bae.db".into(), "d".into())],
        }),
        boxes: Map::new(),
    }
}

fn rpc(conn: u64) -> Requester {
    Requester::Rpc {
        conn: crate::ConnId(conn),
        key_id: "key_a".into(),
    }
}

fn cmds(h: &mut Hub) -> Vec<SandboxCommand> {
    std::iter::from_fn(|| h.poll_command()).collect()
}

fn notices(h: &mut Hub) -> Vec<SandboxNotice> {
    std::iter::from_fn(|| h.poll_notice()).collect()
}

fn op_of(c: &SandboxCommand) -> OpId {
    match c {
        SandboxCommand::EnsureImage { op, .. }
        | SandboxCommand::Start { op, .. }
        | SandboxCommand::Exec { op, .. }
        | SandboxCommand::Stop { op, .. }
        | SandboxCommand::Kill { op } => *op,
    }
}

fn out(stdout: &str, code: i64) -> ExecOutput {
    ExecOutput {
        stdout: stdout.into(),
        exit_code: code,
        ..ExecOutput::default()
    }
}

/// A session `s` with a running sandbox `c1` of image `img`.
fn running(h: &mut Hub) -> Handle {
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    let ensure = op_of(&cmds(h)[0]);
    h.handle_reply(ensure, SandboxReply::Ensured(Ok(())), MonoMs(0));
    let start = op_of(&cmds(h)[0]);
    h.handle_reply(start, SandboxReply::Started(Ok("c1".into())), MonoMs(0));
    notices(h);
    h.handle("s").cloned().unwrap()
}

#[test]
fn c139_start_ensures_the_image_then_runs_it_with_labels() {
    let mut h = hub();
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    let c = cmds(&mut h);
    assert!(matches!(&c[..], [SandboxCommand::EnsureImage { image, .. }] if image == "img"));
    h.handle_reply(op_of(&c[0]), SandboxReply::Ensured(Ok(())), MonoMs(0));
    let c = cmds(&mut h);
    let SandboxCommand::Start { labels, image, .. } = &c[0] else {
        panic!("{c:?}")
    };
    assert_eq!(image, "img");
    assert_eq!(
        labels,
        &vec![
            ("bae.session".to_string(), "s".to_string()),
            ("bae.db".into(), "d".into())
        ]
    );
    h.handle_reply(
        op_of(&c[0]),
        SandboxReply::Started(Ok("c1".into())),
        MonoMs(0),
    );
    let handle = Handle {
        image: "img".into(),
        container: "c1".into(),
    };
    assert_eq!(
        notices(&mut h),
        vec![SandboxNotice::Started {
            session_id: "s".into(),
            requester: rpc(1),
            image: "img".into(),
            result: Ok(handle.clone())
        }]
    );
    assert_eq!(h.handle("s"), Some(&handle));
}

#[test]
fn c140_one_sandbox_per_session_even_while_the_first_is_starting() {
    let mut h = hub();
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    assert_eq!(
        h.start(&SessionId::new("s"), "img", rpc(2)),
        Err(StartRefused::AlreadyRunning)
    );
    let mut h = hub();
    running(&mut h);
    assert_eq!(
        h.start(&SessionId::new("s"), "other", rpc(2)),
        Err(StartRefused::AlreadyRunning)
    );
    assert!(
        h.start(&SessionId::new("t"), "img", rpc(3)).is_ok(),
        "other sessions are independent"
    );
}

#[test]
fn c141_a_failed_ensure_or_run_reports_the_driver_text_and_allows_a_retry() {
    let mut h = hub();
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    let c = cmds(&mut h);
    h.handle_reply(
        op_of(&c[0]),
        SandboxReply::Ensured(Err(DriverError::Image("pull failed".into()))),
        MonoMs(0),
    );
    let SandboxNotice::Started { result, .. } = &notices(&mut h)[0] else {
        panic!()
    };
    assert_eq!(
        result.as_ref().map_err(ToString::to_string),
        Err("sandbox image \"img\" error: pull failed".to_string())
    );
    assert!(h.cmds_empty());
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    let c = cmds(&mut h);
    h.handle_reply(op_of(&c[0]), SandboxReply::Ensured(Ok(())), MonoMs(0));
    let c = cmds(&mut h);
    h.handle_reply(
        op_of(&c[0]),
        SandboxReply::Started(Err(DriverError::Runtime("boom".into()))),
        MonoMs(0),
    );
    let SandboxNotice::Started { result, .. } = &notices(&mut h)[0] else {
        panic!()
    };
    let text = result.as_ref().map_err(ToString::to_string);
    assert_eq!(text, Err("sandbox runtime error: boom".to_string()));
    assert!(h.handle("s").is_none());
}

#[test]
fn stop_removes_the_handle_before_the_driver_stops() {
    let mut h = hub();
    let handle = running(&mut h);
    assert_eq!(
        h.stop(&SessionId::new("s"), rpc(1), StopReason::Explicit),
        Some(handle.clone())
    );
    assert!(h.handle("s").is_none(), "gone before the stop completes");
    assert_eq!(
        h.exec(&SessionId::new("s"), "ls", rpc(2), MonoMs(0)),
        None,
        "nothing dispatched against it"
    );
    assert_eq!(
        h.stop(&SessionId::new("s"), rpc(1), StopReason::Explicit),
        None
    );
    let c = cmds(&mut h);
    assert!(matches!(&c[..], [SandboxCommand::Stop { container, .. }] if container == "c1"));
    h.handle_reply(op_of(&c[0]), SandboxReply::Stopped(Ok(())), MonoMs(0));
    assert_eq!(
        notices(&mut h),
        vec![SandboxNotice::Stopped {
            session_id: "s".into(),
            requester: rpc(1),
            handle,
            reason: StopReason::Explicit,
            result: Ok(())
        }]
    );
}

#[test]
fn execs_hold_the_lock_one_at_a_time_in_order() {
    let mut h = hub();
    running(&mut h);
    assert_eq!(
        h.exec(&SessionId::new("s"), "one", rpc(1), MonoMs(0)),
        Some("c1".into())
    );
    assert_eq!(
        h.exec(&SessionId::new("s"), "two", rpc(2), MonoMs(0)),
        Some("c1".into())
    );
    let c = cmds(&mut h);
    assert_eq!(c.len(), 1, "the second waits for the lock");
    let SandboxCommand::Exec { command, stdin, .. } = &c[0] else {
        panic!()
    };
    assert_eq!((command.as_str(), stdin), ("one", &None));
    h.handle_reply(
        op_of(&c[0]),
        SandboxReply::Exec(Ok(out("1", 0))),
        MonoMs(10),
    );
    let c = cmds(&mut h);
    assert!(matches!(&c[..], [SandboxCommand::Exec { command, .. }] if command == "two"));
    let n = notices(&mut h);
    assert!(
        matches!(&n[..], [SandboxNotice::Executed { requester, result: Ok(o), .. }] if *requester == rpc(1) && o.stdout == "1")
    );
}

#[test]
fn an_exec_past_its_timeout_is_killed_and_reported_as_a_driver_error() {
    let mut h = hub();
    running(&mut h);
    h.exec(&SessionId::new("s"), "sleep 99", rpc(1), MonoMs(100));
    h.exec(&SessionId::new("s"), "next", rpc(2), MonoMs(100));
    let c = cmds(&mut h);
    let op = op_of(&c[0]);
    assert_eq!(h.poll_timeout(), Some(MonoMs(1_100)));
    h.handle_timeout(MonoMs(1_100));
    let c = cmds(&mut h);
    assert_eq!(c[0], SandboxCommand::Kill { op });
    assert!(matches!(&c[1], SandboxCommand::Exec { command, .. } if command == "next"));
    let n = notices(&mut h);
    let SandboxNotice::Executed {
        result: Err(text), ..
    } = &n[0]
    else {
        panic!("{n:?}")
    };
    assert_eq!(
        text.to_string(),
        "sandbox runtime error: exec timed out after 1 s"
    );
    // The late reply of the killed exec is ignored.
    h.handle_reply(op, SandboxReply::Exec(Ok(out("late", 0))), MonoMs(1_200));
    assert!(notices(&mut h).is_empty());
}

fn launch(h: &mut Hub, id: &str, timeout: Option<u64>, now: u64) -> OpId {
    let spec = LaunchSpec {
        id: id.into(),
        harness: "claude".into(),
        model: "m".into(),
        command: "claude --model 'm'".into(),
        stdin: Some(b"the prompt".to_vec()),
        timeout_ms: timeout,
        key_id: "key_a".into(),
    };
    h.launch(&SessionId::new("s"), spec, MonoMs(now)).unwrap();
    let c = cmds(h);
    let SandboxCommand::Exec { stdin, command, .. } = &c[0] else {
        panic!("{c:?}")
    };
    assert_eq!(stdin.as_deref(), Some(&b"the prompt"[..]));
    assert_eq!(command, "claude --model 'm'");
    op_of(&c[0])
}

#[test]
fn c156_subagents_are_reported_once_when_terminal_then_evicted() {
    let mut h = hub();
    running(&mut h);
    let a = launch(&mut h, "sba_a", None, 0);
    launch(&mut h, "sba_b", None, 0);
    assert_eq!(h.running_subagents("s"), 2);
    assert!(h.tracks_subagents("s"));
    h.handle_reply(a, SandboxReply::Exec(Ok(out("done", 0))), MonoMs(5));
    let n = notices(&mut h);
    let SandboxNotice::SubagentEnded { status, .. } = &n[0] else {
        panic!()
    };
    assert_eq!(status.state, SubagentState::Completed);
    let (kind, payload) = status.terminal_event().unwrap();
    assert_eq!(kind.as_str(), "session.subagent.completed");
    assert_eq!(payload["exit_code"], 0);
    let all = h.report("s", None).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["status"], "completed");
    assert_eq!(all[0]["stdout"], "done");
    assert_eq!(all[1]["status"], "running");
    let again = h.report("s", None).unwrap();
    assert_eq!(again.len(), 1, "the terminal entry was evicted");
    assert_eq!(h.report("s", Some("sba_a")), None);
}

#[test]
fn c158_a_subagent_past_its_timeout_is_killed_and_timed_out() {
    let mut h = hub();
    running(&mut h);
    let op = launch(&mut h, "sba_a", Some(2_000), 100);
    assert_eq!(h.poll_timeout(), Some(MonoMs(2_100)));
    h.handle_timeout(MonoMs(2_100));
    assert_eq!(cmds(&mut h), vec![SandboxCommand::Kill { op }]);
    let n = notices(&mut h);
    let SandboxNotice::SubagentEnded { status, .. } = &n[0] else {
        panic!()
    };
    assert_eq!(status.state, SubagentState::TimedOut);
    let (kind, payload) = status.terminal_event().unwrap();
    assert_eq!(kind.as_str(), "session.subagent.failed");
    assert_eq!(payload["reason"], "timeout");
    assert!(payload["exit_code"].is_null());
    assert_eq!(
        h.report("s", Some("sba_a")).unwrap()[0]["status"],
        "timed_out"
    );
}

#[test]
fn c159_c160_c161_cancel_running_terminal_and_unknown() {
    let mut h = hub();
    running(&mut h);
    let op = launch(&mut h, "sba_a", None, 0);
    let CancelOutcome::Cancelled(status) = h.cancel(&SessionId::new("s"), "sba_a") else {
        panic!()
    };
    assert_eq!(cmds(&mut h), vec![SandboxCommand::Kill { op }]);
    assert_eq!(status.terminal_event().unwrap().1["reason"], "explicit");
    assert_eq!(
        h.cancel(&SessionId::new("s"), "sba_a"),
        CancelOutcome::AlreadyTerminal
    );
    assert_eq!(
        h.cancel(&SessionId::new("s"), "sba_nope"),
        CancelOutcome::NotFound
    );
    // A late exit after the cancel changes nothing.
    h.handle_reply(op, SandboxReply::Exec(Ok(out("", 0))), MonoMs(1));
    assert!(notices(&mut h).is_empty());
}

#[test]
fn nonzero_exit_spawn_failure_and_output_truncation() {
    let mut h = hub();
    running(&mut h);
    let a = launch(&mut h, "sba_a", None, 0);
    let b = launch(&mut h, "sba_b", None, 0);
    let big = "é".repeat(40_000); // 80,000 bytes
    h.handle_reply(
        a,
        SandboxReply::Exec(Ok(ExecOutput {
            stdout: big,
            exit_code: 3,
            ..ExecOutput::default()
        })),
        MonoMs(1),
    );
    h.handle_reply(
        b,
        SandboxReply::Exec(Err(DriverError::Runtime("cannot run docker".into()))),
        MonoMs(1),
    );
    let n = notices(&mut h);
    let events: Vec<Value> = n
        .iter()
        .map(|x| match x {
            SandboxNotice::SubagentEnded { status, .. } => status.terminal_event().unwrap().1,
            _ => panic!(),
        })
        .collect();
    assert_eq!(events[0]["reason"], "nonzero_exit");
    assert_eq!(events[0]["exit_code"], 3);
    assert_eq!(events[1]["reason"], "spawn_failed");
    assert_eq!(
        events[1]["detail"],
        "sandbox runtime error: cannot run docker"
    );
    let entries = h.report("s", None).unwrap();
    let stdout = entries[0]["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), 65_536);
    assert_eq!(entries[0]["truncated"], true);
    assert!(!h.tracks_subagents("s"));
}

#[test]
fn c148_c164_close_cancels_subagents_stops_the_sandbox_and_fails_queued_execs() {
    let mut h = hub();
    let handle = running(&mut h);
    let sub = launch(&mut h, "sba_a", None, 0);
    h.exec(&SessionId::new("s"), "one", rpc(1), MonoMs(0));
    h.exec(&SessionId::new("s"), "two", rpc(2), MonoMs(0));
    let exec = op_of(&cmds(&mut h)[0]);
    let (cancelled, stopped) = h.close_session(&SessionId::new("s"), "key_creator");
    assert_eq!(cancelled.len(), 1);
    assert_eq!(
        cancelled[0].terminal_event().unwrap().1["reason"],
        "session_close"
    );
    assert_eq!(stopped, Some(handle));
    let c = cmds(&mut h);
    assert!(c.contains(&SandboxCommand::Kill { op: sub }));
    assert!(c
        .iter()
        .any(|x| matches!(x, SandboxCommand::Stop { container, .. } if container == "c1")));
    let n = notices(&mut h);
    assert!(
        matches!(&n[..], [SandboxNotice::Executed { requester, result: Err(_), .. }] if *requester == rpc(2))
    );
    // The exec in flight still reports; nothing runs after it.
    h.handle_reply(exec, SandboxReply::Exec(Ok(out("", 0))), MonoMs(1));
    assert_eq!(notices(&mut h).len(), 1);
    assert!(cmds(&mut h).is_empty());
}

#[test]
fn a_start_finishing_after_close_stops_its_container() {
    let mut h = hub();
    h.start(&SessionId::new("s"), "img", rpc(1)).unwrap();
    let ensure = op_of(&cmds(&mut h)[0]);
    h.handle_reply(ensure, SandboxReply::Ensured(Ok(())), MonoMs(0));
    let start = op_of(&cmds(&mut h)[0]);
    h.close_session(&SessionId::new("s"), "key_creator");
    h.handle_reply(start, SandboxReply::Started(Ok("c9".into())), MonoMs(1));
    let c = cmds(&mut h);
    assert!(
        matches!(&c[..], [SandboxCommand::Stop { container, .. }] if container == "c9"),
        "{c:?}"
    );
    assert!(h.handle("s").is_none());
}

#[test]
fn provisioning_ensures_images_in_order_and_records_their_status() {
    let mut h = hub();
    h.provision("pro_1", &["a".into(), "b".into()]);
    assert_eq!(h.image_state("pro_1", "a"), ImageState::Pending);
    let c = cmds(&mut h);
    assert!(
        matches!(&c[..], [SandboxCommand::EnsureImage { image, .. }] if image == "a"),
        "one at a time"
    );
    h.handle_reply(op_of(&c[0]), SandboxReply::Ensured(Ok(())), MonoMs(0));
    let c = cmds(&mut h);
    assert!(matches!(&c[..], [SandboxCommand::EnsureImage { image, .. }] if image == "b"));
    h.handle_reply(
        op_of(&c[0]),
        SandboxReply::Ensured(Err(DriverError::Image("pull failed".into()))),
        MonoMs(0),
    );
    assert_eq!(h.image_state("pro_1", "a"), ImageState::Available);
    assert_eq!(
        h.image_state("pro_1", "b"),
        ImageState::Error("pull failed".into())
    );
    assert_eq!(
        h.image_json("pro_1", "b"),
        serde_json::json!({"name": "b", "status": "error", "detail": "pull failed"})
    );
    assert_eq!(notices(&mut h).len(), 2);
    h.provision("pro_1", &[]);
    assert_eq!(h.image_state("pro_1", "a"), ImageState::Pending);
}

/// Every failure renders to the text the events' `detail` and the RPC
/// errors carry (spec 06 §5.8), in one place.
#[test]
fn sandbox_errors_render_their_documented_texts() {
    let cases = [
        (
            DriverError::Image("pull failed".into()).on("img"),
            "sandbox image \"img\" error: pull failed",
        ),
        (
            DriverError::Runtime("boom".into()).on("img"),
            "sandbox runtime error: boom",
        ),
        (
            DriverError::Unsupported("no docker".into()).on("img"),
            "sandbox driver unsupported: no docker",
        ),
        (SandboxError::ClosedBeforeStart, "the session was closed"),
        (
            SandboxError::SessionClosed,
            "sandbox runtime error: the session was closed",
        ),
        (
            SandboxError::Stopped,
            "sandbox runtime error: the remote sandbox was stopped",
        ),
        (
            SandboxError::TimedOut { secs: 30 },
            "sandbox runtime error: exec timed out after 30 s",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}
