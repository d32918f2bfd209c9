//! Token buckets: how the host bounds what a plugin makes it do (writes, access reviews).

use std::time::{Duration, Instant};

/// A token bucket's shape: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub rate: f64,
    /// Most tokens held.
    pub burst: f64,
}

/// A bucket's state.
#[derive(Debug, Clone, Copy)]
pub struct Tokens {
    /// Tokens held (negative while reservations are owed).
    pub left: f64,
    at: Instant,
}

impl Tokens {
    /// A full bucket.
    pub fn full(rate: &Rate, now: Instant) -> Self {
        Self {
            left: rate.burst,
            at: now,
        }
    }

    /// Earns what time gave; how long until a whole token is there.
    pub fn wait(&mut self, rate: &Rate, now: Instant) -> Duration {
        self.earn(rate, now);
        if self.left >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.left) / rate.rate)
        }
    }

    /// Takes a token now or on credit; how long until it is paid for, which is how long the
    /// caller waits. Callers that reserve one after another wait their turn, in order.
    pub fn reserve(&mut self, rate: &Rate, now: Instant) -> Duration {
        self.earn(rate, now);
        self.left -= 1.0;
        if self.left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.left / rate.rate)
        }
    }

    fn earn(&mut self, rate: &Rate, now: Instant) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * rate.rate;
        self.left = (self.left + earned).min(rate.burst);
        self.at = self.at.max(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_should_queue_at_the_rate_once_the_burst_is_spent() {
        let rate = Rate {
            rate: 10.0,
            burst: 3.0,
        };
        let now = Instant::now();
        let mut tokens = Tokens::full(&rate, now);
        let waits: Vec<_> = (0..6).map(|_| tokens.reserve(&rate, now)).collect();
        let ms: Vec<_> = waits.iter().map(|w| w.as_millis()).collect();
        assert_eq!(ms, [0, 0, 0, 100, 200, 300]);
        assert_eq!(
            tokens.reserve(&rate, now + Duration::from_secs(10)),
            Duration::ZERO,
            "a quiet bucket refills, up to its burst"
        );
        assert!((tokens.left - 2.0).abs() < 1e-9);
    }
}
