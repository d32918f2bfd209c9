//! What the benchmarks (host/benches/) share: their settings from the environment, and waiting
//! for a state with a poll fine enough to time it.

use std::future::Future;
use std::time::Duration;

/// How often [`until`] looks: fine enough for the millisecond figures the benchmarks report.
pub const POLL: Duration = Duration::from_millis(20);

/// How long [`until`] waits before it gives up: a bound on a run that went wrong, not part of
/// any figure.
pub const GIVE_UP: Duration = Duration::from_secs(600);

/// The number in the environment variable `name`, or `default` when it is unset or not a number.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Polls `check` every [`POLL`] until it returns `Some`; panics naming `what` after
/// [`GIVE_UP`].
pub async fn until<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    crate::support::poll(GIVE_UP, POLL, what, check).await
}
