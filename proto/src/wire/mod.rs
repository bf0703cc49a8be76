//! REST bodies, events, ids and problem documents as they travel on the wire.
