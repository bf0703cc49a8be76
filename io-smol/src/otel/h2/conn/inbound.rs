//! What the connection does with each frame the peer sends (RFC 9113
//! §5, §6): settings, pings, flow control, GOAWAY and resets, and the
//! response's header blocks and data for our stream.

use std::time::Instant;

use super::{Conn, Io, Stream, MAX_BODY, MAX_HEADER_LIST};
use crate::otel::h2::frame::{self, Frame, DEFAULT_MAX_FRAME, MAX_WINDOW};
use crate::otel::h2::hpack::{DecodeError, Field};
use crate::otel::h2::{Error, Reason};

impl<S: Io> Conn<S> {
    pub(super) fn handle(
        &mut self,
        f: Frame,
        s: &mut Stream,
        deadline: Instant,
    ) -> Result<(), Error> {
        let ours = |stream: u32| stream != 0 && stream == s.id && !s.done;
        match f {
            Frame::Settings { ack: true, .. } => {}
            Frame::Settings { ack: false, params } => {
                for (id, value) in params {
                    self.setting(id, value, s)?;
                }
                frame::settings_ack(&mut self.wbuf);
            }
            Frame::Ping { ack: false, data } => frame::ping(&mut self.wbuf, true, data),
            Frame::Ping { ack: true, .. } => {}
            Frame::GoAway {
                last_stream,
                reason,
            } => {
                self.going_away = Some(reason);
                // Streams up to `last_stream` may still complete (§6.8).
                if ours(s.id) && s.id > last_stream {
                    return Err(Error::GoAway {
                        reason,
                        unprocessed: true,
                    });
                }
            }
            Frame::WindowUpdate { stream, increment } => {
                let inc = i64::from(increment);
                if stream == 0 {
                    self.send_window = grow(self.send_window, inc)?;
                } else if stream == s.id {
                    s.send_window = grow(s.send_window, inc)?;
                }
            }
            Frame::RstStream { stream, reason } => {
                if ours(stream) {
                    return Err(Error::Reset(reason));
                }
                self.known(stream)?;
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
            } => {
                let block = self.continuations(stream, block, end_headers, deadline)?;
                // Decoded whatever the stream: the table state is shared.
                let fields = self.decoder.decode(&block).map_err(|e| match e {
                    DecodeError::Compression(what) => {
                        Error::Protocol(Reason::COMPRESSION_ERROR, what)
                    }
                    DecodeError::ListTooLarge => Error::TooLarge("response header list"),
                })?;
                if ours(stream) {
                    on_headers(s, fields, end_stream)?;
                } else {
                    self.known(stream)?;
                }
            }
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => {
                let len = i64::from(flow_len);
                self.recv_window -= len;
                if self.recv_window < 0 {
                    return Err(flow("DATA beyond the connection window"));
                }
                if flow_len > 0 {
                    frame::window_update(&mut self.wbuf, 0, flow_len);
                    self.recv_window += len;
                }
                if !ours(stream) {
                    return self.known(stream);
                }
                s.recv_window -= len;
                if s.recv_window < 0 {
                    return Err(flow("DATA beyond the stream window"));
                }
                if !s.head {
                    return Err(protocol("DATA before the response headers"));
                }
                if s.response.body.len() + data.len() > MAX_BODY {
                    return Err(Error::TooLarge("response message"));
                }
                s.response.body.extend_from_slice(&data);
                if end_stream {
                    s.done = true;
                } else if flow_len > 0 {
                    frame::window_update(&mut self.wbuf, s.id, flow_len);
                    s.recv_window += len;
                }
            }
            Frame::PushPromise => return Err(protocol("PUSH_PROMISE although push is off")),
            Frame::Continuation { .. } => return Err(protocol("CONTINUATION without HEADERS")),
            Frame::Priority | Frame::Unknown => {}
        }
        Ok(())
    }

    /// A frame for a stream that is not our open one must name a stream we
    /// opened and closed before (§5.1: anything else is "idle").
    fn known(&self, stream: u32) -> Result<(), Error> {
        if stream.is_multiple_of(2) || stream >= self.next_stream {
            return Err(protocol("frame on a stream we did not open"));
        }
        Ok(())
    }

    /// The rest of a header block: CONTINUATION frames, nothing between
    /// them (§6.10), within the size bound.
    fn continuations(
        &mut self,
        stream: u32,
        mut block: Vec<u8>,
        mut end: bool,
        deadline: Instant,
    ) -> Result<Vec<u8>, Error> {
        while !end {
            match self.read_frame(deadline)? {
                Frame::Continuation {
                    stream: s,
                    end_headers,
                    block: more,
                } if s == stream => {
                    if block.len() + more.len() > MAX_HEADER_LIST {
                        return Err(Error::TooLarge("response header block"));
                    }
                    block.extend_from_slice(&more);
                    end = end_headers;
                }
                _ => return Err(protocol("header block interrupted")),
            }
        }
        Ok(block)
    }

    fn setting(&mut self, id: u16, value: u32, s: &mut Stream) -> Result<(), Error> {
        match id {
            frame::ENABLE_PUSH if value != 0 => Err(protocol("server enabled push")),
            frame::MAX_CONCURRENT_STREAMS => {
                self.peer_max_streams = value;
                Ok(())
            }
            frame::INITIAL_WINDOW_SIZE => {
                if value > MAX_WINDOW {
                    return Err(flow("SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"));
                }
                // §6.9.2: open streams' windows move by the difference.
                let delta = i64::from(value) - i64::from(self.peer_initial_window);
                self.peer_initial_window = value;
                if s.id != 0 {
                    s.send_window = grow(s.send_window, delta)?;
                }
                Ok(())
            }
            frame::MAX_FRAME_SIZE => {
                if !(DEFAULT_MAX_FRAME..=frame::MAX_FRAME_LIMIT).contains(&value) {
                    return Err(protocol("SETTINGS_MAX_FRAME_SIZE out of range"));
                }
                self.peer_max_frame = value;
                Ok(())
            }
            // The encoder never indexes, so the table size is moot; the
            // header list size is advisory; unknown ids are ignored.
            _ => Ok(()),
        }
    }
}

/// Response headers: interim 1xx skipped, then the final head, then
/// trailers (which must end the stream).
fn on_headers(s: &mut Stream, fields: Vec<Field>, end_stream: bool) -> Result<(), Error> {
    if s.head {
        if !end_stream {
            return Err(protocol("second header block without END_STREAM"));
        }
        s.response.trailers = fields;
        s.done = true;
        return Ok(());
    }
    let status = fields
        .first()
        .filter(|(n, _)| n == b":status")
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
        .ok_or_else(|| protocol("response without a valid :status"))?;
    if (100..200).contains(&status) {
        if end_stream {
            return Err(protocol("interim response ends the stream"));
        }
        return Ok(());
    }
    s.head = true;
    s.done = end_stream;
    s.response.status = status;
    s.response.headers = fields;
    Ok(())
}

fn grow(window: i64, by: i64) -> Result<i64, Error> {
    let w = window + by;
    if w > i64::from(MAX_WINDOW) {
        return Err(flow("flow-control window above 2^31-1"));
    }
    Ok(w)
}

fn protocol(what: &'static str) -> Error {
    Error::Protocol(Reason::PROTOCOL_ERROR, what)
}

fn flow(what: &'static str) -> Error {
    Error::Protocol(Reason::FLOW_CONTROL_ERROR, what)
}
