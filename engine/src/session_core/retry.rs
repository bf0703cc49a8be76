//! A provider entry's retry policy (docs/extensions.md, "Provider
//! traffic"): which failed attempts are tried again on the same entry, and
//! after how long. Off unless the entry configures it; the reference walks
//! to the fallback on every failure (spec 05 §5.1).
//!
//! Pure: how the attempt failed and the retries already made in, a
//! [`Decision`] out. The engine turns an advised instant into a delay
//! against its own wall clock when the reply arrives, and draws a
//! backoff's jitter from its injected entropy when it arms the wait.

use crate::ProviderReply;

/// `retry` of a `[[providers.entries]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries of one attempt (not counting the first try).
    pub max_retries: u32,
    /// The longest wait before one retry; an advised wait beyond it goes
    /// to the fallback at once.
    pub max_wait_ms: u64,
    /// The first backoff's ceiling when nothing was advised; doubled per
    /// retry, capped by `max_wait_ms`.
    pub backoff_ms: u64,
    /// HTTP statuses retried.
    pub statuses: Vec<u16>,
    /// Whether transport failures (connect, TLS, I/O, timeout: `status:
    /// null`) are retried too.
    pub transport: bool,
}

/// Statuses retried unless configured: too many requests, service
/// unavailable, and Anthropic's overloaded.
pub const DEFAULT_STATUSES: [u16; 3] = [429, 503, 529];

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            max_wait_ms: 30_000,
            backoff_ms: 500,
            statuses: DEFAULT_STATUSES.to_vec(),
            transport: false,
        }
    }
}

/// How long a retry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// Exactly this long: the provider advised it.
    Advised(u64),
    /// Between half this ceiling and all of it, drawn by the engine
    /// ("equal jitter": retries of many sessions spread out, and none
    /// comes back at once).
    Backoff { ceiling_ms: u64 },
}

impl Delay {
    /// The wait in ms, with `draw` a uniformly random number.
    pub fn resolve(self, draw: u64) -> u64 {
        match self {
            Delay::Advised(ms) => ms,
            Delay::Backoff { ceiling_ms } => {
                let half = ceiling_ms / 2;
                half + draw % (ceiling_ms - half + 1)
            }
        }
    }
}

/// How an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// An HTTP status outside 2xx, with the delay its headers advised.
    Status(u16, Option<u64>),
    /// No HTTP response (connect, TLS, I/O, timeout).
    Transport,
    /// Anything else (a credential, an unusable body): never retried.
    Other,
}

impl Failure {
    /// How `reply` failed, if it did (a 2xx whose body turns out unusable
    /// is [`Failure::Other`]). An advised instant counts from 0: the
    /// engine has made it a delay already.
    pub fn of(reply: &ProviderReply) -> Failure {
        match reply {
            ProviderReply::Http { status, advice, .. } if !(200..300).contains(status) => {
                Failure::Status(*status, advice.delay_ms(0))
            }
            ProviderReply::Transport(_) => Failure::Transport,
            _ => Failure::Other,
        }
    }
}

/// What a failed attempt's reply means under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not a retryable failure, or none left: the walk goes on.
    Walk,
    /// The provider advised a wait past the policy's maximum: the walk
    /// goes on at once.
    TooLong { advised_ms: u64 },
    /// Try the same entry again after the delay.
    Retry(Delay),
}

impl RetryPolicy {
    /// What to do after `failure` of an attempt already retried `retries`
    /// times.
    pub fn decide(&self, failure: Failure, retries: u32) -> Decision {
        let advised = match failure {
            Failure::Status(status, advised) if self.statuses.contains(&status) => advised,
            Failure::Transport if self.transport => None,
            _ => return Decision::Walk,
        };
        if retries >= self.max_retries {
            return Decision::Walk;
        }
        match advised {
            Some(ms) if ms > self.max_wait_ms => Decision::TooLong { advised_ms: ms },
            Some(ms) => Decision::Retry(Delay::Advised(ms)),
            None => {
                let doubled = (self.backoff_ms).saturating_mul(1u64 << retries.min(32));
                let ceiling_ms = doubled.min(self.max_wait_ms);
                Decision::Retry(Delay::Backoff { ceiling_ms })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, advised: Option<u64>) -> Failure {
        Failure::Status(status, advised)
    }

    #[test]
    fn retryable_statuses_follow_the_advice() {
        let p = RetryPolicy::default();
        let r = http(429, Some(1000));
        assert_eq!(p.decide(r, 0), Decision::Retry(Delay::Advised(1000)));
        assert_eq!(p.decide(r, 1), Decision::Retry(Delay::Advised(1000)));
        assert_eq!(p.decide(r, 2), Decision::Walk, "max_retries reached");
        let dated = http(503, Some(1_500));
        assert_eq!(p.decide(dated, 0), Decision::Retry(Delay::Advised(1_500)));
        let long = http(529, Some(31_000));
        assert_eq!(p.decide(long, 0), Decision::TooLong { advised_ms: 31_000 });
        assert_eq!(p.decide(http(500, Some(1)), 0), Decision::Walk);
        assert_eq!(p.decide(http(200, None), 0), Decision::Walk);
    }

    #[test]
    fn without_advice_the_backoff_doubles_up_to_the_maximum() {
        let p = RetryPolicy {
            max_retries: 10,
            max_wait_ms: 3_000,
            ..RetryPolicy::default()
        };
        let r = http(503, None);
        let ceilings: Vec<_> = (0..5)
            .map(|n| match p.decide(r, n) {
                Decision::Retry(Delay::Backoff { ceiling_ms }) => ceiling_ms,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ceilings, [500, 1000, 2000, 3000, 3000]);
        assert_eq!(p.decide(r, 200), Decision::Walk);
        let d = Delay::Backoff { ceiling_ms: 1000 };
        assert_eq!(d.resolve(0), 500);
        assert_eq!(d.resolve(500), 1000);
        assert!((0..2000).all(|x| (500..=1000).contains(&d.resolve(x))));
        assert_eq!(Delay::Backoff { ceiling_ms: 0 }.resolve(7), 0);
    }

    #[test]
    fn transport_failures_only_when_configured() {
        let t = Failure::Transport;
        let c = Failure::Other;
        let off = RetryPolicy::default();
        assert_eq!(off.decide(t, 0), Decision::Walk);
        let on = RetryPolicy {
            transport: true,
            ..RetryPolicy::default()
        };
        assert!(matches!(
            on.decide(t, 0),
            Decision::Retry(Delay::Backoff { .. })
        ));
        assert_eq!(on.decide(c, 0), Decision::Walk, "a credential never heals");
    }
}
