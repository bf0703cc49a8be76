//! Why a store read has no answer, typed from the driver to the reader that
//! asked. The text is written in one place, [`ReadError`]'s `Display`: it
//! goes to the logs only (the wire says `internal error` or the error its
//! caller chose), and it reads as the plain strings did before the type.

use std::fmt;

use super::ReadResult;

#[derive(Debug, Clone, PartialEq)]
pub enum ReadError {
    /// The store failed; the driver's log-safe text of the failure.
    Store(String),
    /// The driver stopped before the read was answered.
    Stopping,
    /// The read was answered with another kind of result than it asks for.
    Unexpected,
    /// A history load's read was answered with another kind of result (the
    /// answer is kept for the log line).
    HistoryAnswer(Box<ReadResult>),
}

impl ReadError {
    /// The error of a result that is not the answer its reader expected:
    /// the store's own error, or [`ReadError::Unexpected`].
    pub fn of<T>(result: Result<T, ReadError>) -> ReadError {
        result.err().unwrap_or(ReadError::Unexpected)
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Store(text) => f.write_str(text),
            ReadError::Stopping => f.write_str("the server is stopping"),
            ReadError::Unexpected => f.write_str("unexpected answer"),
            ReadError::HistoryAnswer(answer) => write!(f, "history read answered with {answer:?}"),
        }
    }
}

impl std::error::Error for ReadError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log lines read as the plain strings did before the type.
    #[test]
    fn each_failure_renders_the_text_the_readers_logged() {
        let texts = [
            (ReadError::Store("disk on fire".into()), "disk on fire"),
            (ReadError::Stopping, "the server is stopping"),
            (ReadError::Unexpected, "unexpected answer"),
            (
                ReadError::HistoryAnswer(Box::new(ReadResult::EventSeq(Some(1)))),
                "history read answered with EventSeq(Some(1))",
            ),
        ];
        for (e, text) in texts {
            assert_eq!(e.to_string(), text);
        }
        let answered: Result<ReadResult, ReadError> = Ok(ReadResult::EventSeq(None));
        assert_eq!(ReadError::of(answered), ReadError::Unexpected);
        assert_eq!(
            ReadError::of::<()>(Err(ReadError::Stopping)),
            ReadError::Stopping
        );
    }
}
