//! Reader connections: `BAE_DATABASE_POOL_SIZE - 1` extra connections, each
//! on its own thread, that answer a run of consecutive reads in parallel.
//!
//! The ordering contract is kept by the caller: a run is handed out only
//! after every commit queued before it has finished, and the next commit
//! waits until the whole run is answered, so each read sees exactly the
//! writes emitted before it (as on the single SQLite connection).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use engine::store::{ReadResult, StoreRead};
use postgres::NoTls;

use super::ops::prepare_all;
use super::read::{read_with, ReadError};
use super::{client_config, pg_text};
use crate::config::DatabaseUrl;
use crate::store::{Result, StoreError};

type Answer = (usize, Result<ReadResult>);

struct Reader {
    jobs: Sender<(usize, StoreRead)>,
    thread: Option<JoinHandle<()>>,
}

/// See the module docs.
pub(crate) struct Readers {
    readers: Vec<Reader>,
    answers: Receiver<Answer>,
}

impl Readers {
    /// Opens `n` reader connections (none for `n == 0`).
    pub fn start(url: &DatabaseUrl, n: usize) -> Result<Readers> {
        let (answer_tx, answers) = channel();
        let mut readers = Vec::with_capacity(n);
        for i in 0..n {
            let config = client_config(url, "baesrv-reader")?;
            let connect_err = |e: postgres::Error| StoreError::Connect {
                target: url.to_string(),
                detail: pg_text(url, &e),
            };
            let mut client = config.connect(NoTls).map_err(connect_err)?;
            let stmts = prepare_all(&mut client).map_err(connect_err)?;
            let (jobs, job_rx) = channel::<(usize, StoreRead)>();
            let answer_tx = answer_tx.clone();
            let url = url.clone();
            let thread = std::thread::Builder::new()
                .name(format!("bae-store-read-{i}"))
                .spawn(move || {
                    while let Ok((idx, read)) = job_rx.recv() {
                        let r = read_with(&mut client, &stmts, &read).map_err(|e| match e {
                            ReadError::Pg(e) if client.is_closed() => {
                                StoreError::ConnectionLost(pg_text(&url, &e))
                            }
                            ReadError::Pg(e) => StoreError::Postgres(pg_text(&url, &e)),
                            ReadError::Store(e) => e,
                        });
                        if answer_tx.send((idx, r)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| StoreError::Postgres(format!("cannot start a reader thread: {e}")))?;
            readers.push(Reader {
                jobs,
                thread: Some(thread),
            });
        }
        Ok(Readers { readers, answers })
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }

    /// Answers `reads` spread over the readers; results in `reads` order.
    pub fn run(&mut self, reads: Vec<StoreRead>) -> Vec<Result<ReadResult>> {
        let n = reads.len();
        let mut out: Vec<Option<Result<ReadResult>>> = (0..n).map(|_| None).collect();
        let mut sent = 0;
        for (i, read) in reads.into_iter().enumerate() {
            let reader = &self.readers[i % self.readers.len()];
            if reader.jobs.send((i, read)).is_ok() {
                sent += 1;
            } else {
                out[i] = Some(Err(StoreError::ConnectionLost(
                    "a reader connection's thread has stopped".into(),
                )));
            }
        }
        for _ in 0..sent {
            match self.answers.recv() {
                Ok((i, r)) => out[i] = Some(r),
                Err(_) => break,
            }
        }
        out.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(StoreError::ConnectionLost(
                        "a reader connection's thread has stopped".into(),
                    ))
                })
            })
            .collect()
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        let threads: Vec<JoinHandle<()>> = self
            .readers
            .iter_mut()
            .filter_map(|r| r.thread.take())
            .collect();
        // Closing the job channels ends the threads.
        self.readers.clear();
        for t in threads {
            let _ = t.join();
        }
    }
}
