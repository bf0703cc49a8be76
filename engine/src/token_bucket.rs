//! A token bucket of `rate` units per `period_ms`, holding at most
//! `capacity` units, kept in integer "unit-ms" (a unit is `period_ms`
//! unit-ms) so refills are exact without floats. It refills continuously
//! and may go into debt when a call turns out to cost more than estimated.
//! Provider limits use it per minute (capacity: a minute's worth), quotas
//! per second (capacity: the burst).

use crate::MonoMs;

#[derive(Debug, Clone)]
pub struct Bucket {
    /// Units per period; also the unit-ms gained per ms.
    rate: u64,
    /// Unit-ms per unit (the period in ms).
    scale: i128,
    /// Unit-ms the bucket holds at most.
    capacity: i128,
    /// Unit-ms available (negative: debt).
    level: i128,
    at: MonoMs,
}

impl Bucket {
    /// A full bucket of `per_minute` units, refilled over a minute.
    pub fn new(per_minute: u64, now: MonoMs) -> Bucket {
        Bucket::with_burst(per_minute, 60_000, per_minute, now)
    }

    /// A full bucket of `burst` units, refilled at `rate` per `period_ms`.
    pub fn with_burst(rate: u64, period_ms: u64, burst: u64, now: MonoMs) -> Bucket {
        let scale = i128::from(period_ms.max(1));
        let capacity = i128::from(burst) * scale;
        Bucket {
            rate,
            scale,
            capacity,
            level: capacity,
            at: now,
        }
    }

    /// Units per period.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn refill(&mut self, now: MonoMs) {
        if now > self.at {
            let gained = i128::from(now - self.at) * i128::from(self.rate);
            self.level = (self.level + gained).min(self.capacity);
            self.at = now;
        }
    }

    /// What `units` cost: never more than a full bucket, so a call larger
    /// than the bucket waits for a full one instead of forever.
    fn cost(&self, units: u64) -> i128 {
        (i128::from(units) * self.scale).min(self.capacity)
    }

    /// Ms from `now` until `units` can be taken (0: now).
    pub fn wait_ms(&mut self, now: MonoMs, units: u64) -> u64 {
        self.refill(now);
        let missing = self.cost(units) - self.level;
        if missing <= 0 || self.rate == 0 {
            return 0;
        }
        let rate = i128::from(self.rate);
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
        let delta = (i128::from(estimated) - i128::from(actual)) * self.scale;
        self.level = (self.level + delta).min(self.capacity);
    }

    /// Whole units available now (0 in debt).
    pub fn available(&mut self, now: MonoMs) -> u64 {
        self.refill(now);
        u64::try_from(self.level.max(0) / self.scale).unwrap_or(0)
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
