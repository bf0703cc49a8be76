//! WAL checkpoints off the commit path. SQLite's automatic checkpoint runs
//! inside the commit that crosses its threshold, on the store thread, so
//! every thousandth page or so one commit (and every response waiting for
//! it) took several milliseconds longer; profiles put checkpoints at about
//! 29 % of the store thread's time under turn load. The server's store
//! connection instead raises the automatic threshold to a backstop, and a
//! thread of its own runs `PRAGMA wal_checkpoint(PASSIVE)` on a second
//! connection shortly after commits: a passive checkpoint never blocks the
//! writer or readers, and copying frames to the database file changes
//! nothing about what is durable (the WAL already holds every commit).
//!
//! A passive checkpoint racing a busy writer never copies the frames
//! committed while it ran, so the WAL would never be reset and would grow
//! for as long as the load lasts. Once it holds [`RESTART_PAGES`], a
//! `RESTART` checkpoint follows the passive one: it holds writers off only
//! while it copies what the passive pass left (little), after which the
//! next commit starts the WAL from its beginning again.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;
use std::time::Duration;

use sqlite::Connection;

/// After the first commit of a quiet spell, wait this long before
/// checkpointing, so that hot pages are copied once per spell rather than
/// once per commit.
pub const CHECKPOINT_DELAY: Duration = Duration::from_millis(100);

/// The store connection's automatic checkpoint threshold when a
/// [`Checkpointer`] runs (pages; about 40 MB of WAL): reached only if the
/// checkpointer falls far behind.
pub const BACKSTOP_PAGES: u32 = 10_000;

/// WAL size (pages; about 16 MB) from which a passive checkpoint is
/// followed by a `RESTART` one.
pub const RESTART_PAGES: i64 = 4_000;

/// Handle of the checkpoint thread; it ends when this is dropped.
pub struct Checkpointer {
    nudge: SyncSender<()>,
}

impl Checkpointer {
    /// Starts the thread with its own connection to `path`; `None` (and a
    /// warning) when that connection cannot be opened, in which case the
    /// caller keeps SQLite's automatic checkpoints.
    pub fn start(path: &Path) -> Option<Checkpointer> {
        let flags = sqlite::OpenFlags::new().with_read_write().with_no_mutex();
        let mut conn = match Connection::open_with_flags(path, flags) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %super::sqlite_text(&e), "checkpoint connection refused; keeping automatic checkpoints");
                return None;
            }
        };
        let _ = conn.set_busy_timeout(super::BUSY_TIMEOUT_MS);
        let (nudge, rx) = sync_channel(1);
        let spawned = thread::Builder::new()
            .name("bae-checkpoint".into())
            .spawn(move || run(conn, rx));
        match spawned {
            Ok(_) => Some(Checkpointer { nudge }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the checkpoint thread; keeping automatic checkpoints");
                None
            }
        }
    }

    /// A commit happened: a checkpoint follows within [`CHECKPOINT_DELAY`].
    /// Never blocks (a nudge already pending covers this commit too).
    pub fn committed(&self) {
        // Full: a nudge is pending; disconnected: the thread is gone and
        // the backstop checkpoints instead.
        let _ = self.nudge.try_send(());
    }
}

fn run(conn: Connection, rx: Receiver<()>) {
    while rx.recv().is_ok() {
        thread::sleep(CHECKPOINT_DELAY);
        // Commits during the delay are covered by this checkpoint.
        while rx.try_recv().is_ok() {}
        if checkpoint(&conn, "PASSIVE").is_some_and(|log| log >= RESTART_PAGES) {
            checkpoint(&conn, "RESTART");
        }
    }
}

/// Runs one checkpoint; returns the WAL's size in frames, `None` when it
/// failed (busy or I/O trouble: the WAL keeps everything, and the next
/// nudge or the backstop tries again).
fn checkpoint(conn: &Connection, mode: &str) -> Option<i64> {
    let result = (|| {
        let mut st = conn.prepare(format!("PRAGMA wal_checkpoint({mode})"))?;
        st.next()?;
        st.read::<i64, _>(1)
    })();
    result
        .inspect_err(|e| tracing::debug!(error = %super::sqlite_text(e), mode, "checkpoint failed"))
        .ok()
}
