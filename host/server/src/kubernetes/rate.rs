//! kube-scheduler's client-side rate limit.

/// kube-scheduler's client-side rate limit (client-go's token bucket): `qps` requests a second
/// on average and bursts of up to `burst`; a request over the limit waits for its turn.
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    /// Tokens left (negative: requests already waiting for later tokens) and when counted.
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl RateLimiter {
    /// A bucket that starts full.
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimiter {
            qps,
            burst: f64::from(burst),
            state: std::sync::Mutex::new((f64::from(burst), std::time::Instant::now())),
        }
    }

    /// Takes a token at `now`; returns how long the request must wait for it.
    fn reserve(&self, now: std::time::Instant) -> std::time::Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, counted) = &mut *state;
        let refill = now.saturating_duration_since(*counted).as_secs_f64() * self.qps;
        *tokens = (*tokens + refill).min(self.burst) - 1.0;
        *counted = now.max(*counted);
        if *tokens >= 0.0 {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs_f64(-*tokens / self.qps)
        }
    }

    /// Waits until one more request may be sent.
    pub async fn acquire(&self) {
        let wait = self.reserve(std::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_rate_limiter_lets_a_burst_through_then_spaces_requests_at_the_qps() {
        let limiter = RateLimiter::new(10.0, 3);
        let start = Instant::now();
        let waits: Vec<Duration> = (0..5).map(|_| limiter.reserve(start)).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 100, 200]);
        // After a quiet second the bucket is full again, but holds no more than the burst.
        let later = start + Duration::from_secs(10);
        let waits: Vec<u128> = (0..4).map(|_| limiter.reserve(later).as_millis()).collect();
        assert_eq!(waits, [0, 0, 0, 100]);
    }
}
