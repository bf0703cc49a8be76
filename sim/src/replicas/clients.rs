//! The clients of the replica simulation: each creates one session through
//! a replica the "load balancer" picks at random, registers as its driver
//! and sends text turns, retrying on `503`, on a closed connection and on
//! `-32001` (registrations that did not follow a failover). What a client
//! was answered is what the end check holds the database to: every event
//! of an acknowledged turn (`result.events`) must be stored.

use serde_json::{json, Value};

use crate::http::{self, Parsed, ResponseReader};

/// What a request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Create,
    Register,
    Send,
}

/// One simulated client.
#[derive(Debug)]
pub struct Client {
    /// Its client key.
    pub token: String,
    pub session: Option<(String, String)>,
    pub registered: bool,
    /// The connection of its request in flight.
    pub busy: Option<u64>,
    pub sends: u64,
}

/// The client side of one connection (one request, `Connection: close`).
#[derive(Debug)]
pub struct Conn {
    pub client: usize,
    pub kind: Kind,
    pub reader: ResponseReader,
    pub status: Option<u16>,
    pub body: Vec<u8>,
    pub terminal: Option<Value>,
    pub ended: bool,
}

/// How a request turned out, for the client's next step.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Created {
        session_id: String,
        key: String,
    },
    Registered,
    /// A turn's terminal result: the ids of its `result.events`.
    Answered {
        events: Vec<String>,
    },
    /// `-32001`: register again.
    NotDriver,
    /// `503`, an error, or no complete answer: try again later.
    Retry,
}

impl Client {
    pub fn new(i: usize) -> Client {
        Client {
            token: format!("bae_cli_{i:048}"),
            session: None,
            registered: false,
            busy: None,
            sends: 0,
        }
    }

    /// The next request's bytes and kind.
    pub fn next_request(&mut self) -> (Vec<u8>, Kind) {
        let Some((sid, skey)) = &self.session else {
            let body = b"{}".as_slice();
            let bytes = http::request("POST", "/api/v1/sessions", Some(&self.token), Some(body));
            return (bytes, Kind::Create);
        };
        let path = format!("/api/v1/sessions/{sid}/rpc");
        let (body, kind) = if self.registered {
            self.sends += 1;
            let text = format!("message {}", self.sends);
            let call = json!({"jsonrpc": "2.0", "id": self.sends, "method": "session.sendMessage",
                              "params": {"message": {"role": "user", "content": text}}});
            (call, Kind::Send)
        } else {
            let call = json!({"jsonrpc": "2.0", "id": 0, "method": "session.registerDriver", "params": {}});
            (call, Kind::Register)
        };
        let body = body.to_string().into_bytes();
        (http::request("POST", &path, Some(skey), Some(&body)), kind)
    }

    /// Takes `outcome` into account.
    pub fn learn(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Created { session_id, key } => {
                self.session = Some((session_id.clone(), key.clone()));
                self.registered = false;
            }
            Outcome::Registered => self.registered = true,
            Outcome::NotDriver => self.registered = false,
            Outcome::Answered { .. } | Outcome::Retry => {}
        }
    }
}

impl Conn {
    pub fn new(client: usize, kind: Kind) -> Conn {
        Conn {
            client,
            kind,
            reader: ResponseReader::default(),
            status: None,
            body: Vec::new(),
            terminal: None,
            ended: false,
        }
    }

    /// Response bytes arrived; `true` once the response is complete.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut out = Vec::new();
        self.reader.feed(bytes, &mut out);
        for p in out {
            match p {
                Parsed::Head { status } => self.status = Some(status),
                Parsed::Frame(v) => {
                    if v.get("result").is_some() || v.get("error").is_some() {
                        self.terminal = Some(v);
                    }
                }
                Parsed::Body(b) => self.body = b,
                Parsed::End => self.ended = true,
                Parsed::Garbage(_) => self.ended = true,
            }
        }
        self.ended
    }

    /// What the (complete or cut) response means.
    pub fn outcome(&self) -> Outcome {
        if !self.ended {
            return Outcome::Retry;
        }
        match (&self.kind, self.status) {
            (Kind::Create, Some(201)) => {
                let v: Value = serde_json::from_slice(&self.body).unwrap_or(Value::Null);
                match (v["session_id"].as_str(), v["session_key"].as_str()) {
                    (Some(s), Some(k)) => Outcome::Created {
                        session_id: s.to_string(),
                        key: k.to_string(),
                    },
                    _ => Outcome::Retry,
                }
            }
            (Kind::Register | Kind::Send, Some(200)) => {
                let Some(t) = &self.terminal else {
                    return Outcome::Retry;
                };
                if t["error"]["code"] == -32001 {
                    return Outcome::NotDriver;
                }
                if self.kind == Kind::Register {
                    return match t["result"]["registered"] == true {
                        true => Outcome::Registered,
                        false => Outcome::Retry,
                    };
                }
                match t["result"]["events"].as_array() {
                    Some(evs) => Outcome::Answered {
                        events: evs
                            .iter()
                            .filter_map(|e| e["id"].as_str().map(String::from))
                            .collect(),
                    },
                    None => Outcome::Retry,
                }
            }
            _ => Outcome::Retry,
        }
    }
}

/// An Anthropic reply with one text block.
pub fn provider_text(n: u64) -> Vec<u8> {
    json!({
        "id": format!("msg_{n}"),
        "type": "message",
        "role": "assistant",
        "model": "sim-model",
        "content": [{"type": "text", "text": format!("answer {n}")}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 4},
    })
    .to_string()
    .into_bytes()
}
