//! A token bucket in whole units per minute, kept in integer "unit-ms" (a
//! unit is `60_000` unit-ms) so refills are exact without floats: the
//! bucket holds at most one minute's worth, refills continuously, and may
//! go into debt when a call turns out to cost more than estimated.

use crate::MonoMs;

/// Unit-ms per unit: a bucket refills `per_minute` units per 60 000 ms,
/// i.e. `per_minute` unit-ms per ms.
const SCALE: i128 = 60_000;

#[derive(Debug, Clone)]
pub struct Bucket {
    per_minute: u64,
    /// Unit-ms available (negative: debt).
    level: i128,
    at: MonoMs,
}

impl Bucket {
    /// A full bucket of `per_minute` units at `now`.
    pub fn new(per_minute: u64, now: MonoMs) -> Bucket {
        Bucket {
            per_minute,
            level: i128::from(per_minute) * SCALE,
            at: now,
        }
    }

    fn capacity(&self) -> i128 {
        i128::from(self.per_minute) * SCALE
    }

    fn refill(&mut self, now: MonoMs) {
        if now > self.at {
            let gained = i128::from(now - self.at) * i128::from(self.per_minute);
            self.level = (self.level + gained).min(self.capacity());
            self.at = now;
        }
    }

    /// What `units` cost: never more than a full bucket, so a call larger
    /// than a minute's budget waits for a full bucket instead of forever.
    fn cost(&self, units: u64) -> i128 {
        (i128::from(units) * SCALE).min(self.capacity())
    }

    /// Ms from `now` until `units` can be taken (0: now).
    pub fn wait_ms(&mut self, now: MonoMs, units: u64) -> u64 {
        self.refill(now);
        let missing = self.cost(units) - self.level;
        if missing <= 0 || self.per_minute == 0 {
            return 0;
        }
        let rate = i128::from(self.per_minute);
        u64::try_from((missing + rate - 1) / rate).unwrap_or(u64::MAX)
    }

    /// Takes `units` (call after `wait_ms` answered 0).
    pub fn take(&mut self, now: MonoMs, units: u64) {
        self.refill(now);
        self.level -= self.cost(units);
    }

    /// A call that took `estimated` units used `actual`: the difference is
    /// refunded or owed.
    pub fn settle(&mut self, now: MonoMs, estimated: u64, actual: u64) {
        self.refill(now);
        let delta = (i128::from(estimated) - i128::from(actual)) * SCALE;
        self.level = (self.level + delta).min(self.capacity());
    }

    /// Whole units available now (0 in debt).
    pub fn available(&mut self, now: MonoMs) -> u64 {
        self.refill(now);
        u64::try_from(self.level.max(0) / SCALE).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_continuously_and_caps_at_a_minute() {
        let mut b = Bucket::new(60, MonoMs(0));
        assert_eq!(b.wait_ms(MonoMs(0), 60), 0);
        b.take(MonoMs(0), 60);
        assert_eq!(b.available(MonoMs(0)), 0);
        // One unit per second.
        assert_eq!(b.wait_ms(MonoMs(0), 1), 1000);
        assert_eq!(b.wait_ms(MonoMs(999), 1), 1);
        assert_eq!(b.wait_ms(MonoMs(1000), 1), 0);
        assert_eq!(
            b.available(MonoMs(10 * 60_000)),
            60,
            "capped at a minute's worth"
        );
    }

    #[test]
    fn oversized_calls_wait_for_a_full_bucket_and_debt_is_repaid() {
        let mut b = Bucket::new(100, MonoMs(0));
        b.take(MonoMs(0), 30);
        assert_eq!(b.wait_ms(MonoMs(0), 1000), 18_000, "30 units at 100/min");
        b.take(MonoMs(18_000), 1000);
        assert_eq!(b.available(MonoMs(18_000)), 0);
        let mut d = Bucket::new(100, MonoMs(0));
        d.take(MonoMs(0), 10);
        d.settle(MonoMs(0), 10, 150);
        assert_eq!(d.available(MonoMs(0)), 0);
        assert_eq!(
            d.wait_ms(MonoMs(0), 1),
            30_600,
            "50 units of debt, then one"
        );
        d.settle(MonoMs(0), 150, 10);
        assert_eq!(d.available(MonoMs(0)), 90);
    }
}
