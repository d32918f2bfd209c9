//! The guest memory all plugins' calls may hold at once. Each call may grow its instance to
//! its plugin's memory limit (64 MiB by default); sixteen of them at once would be a gigabyte,
//! more than the chart gives the whole container. So each call first reserves its limit from
//! one budget, derived from the container's memory limit, and waits while the budget is taken:
//! a host under load slows down instead of being OOM-killed.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The share of the container's memory limit guests may hold: the rest is the host's own
/// (caches, the compile worker when it runs, warm instances).
pub const SHARE_OF_LIMIT: u64 = 2;

/// A limit at or past this is no limit (cgroup v1 says "unlimited" with a huge number).
const UNLIMITED: u64 = 1 << 50;

/// The budget, in MiB.
#[derive(Debug, Clone)]
pub struct GuestMemory {
    permits: Arc<Semaphore>,
    total_mib: u32,
}

impl GuestMemory {
    /// A budget of `bytes` (`None`: unbounded).
    pub fn new(bytes: Option<u64>) -> Self {
        let total_mib = bytes.map_or(u32::MAX >> 3, |b| {
            u32::try_from(b >> 20).unwrap_or(u32::MAX >> 3).max(1)
        });
        Self {
            permits: Arc::new(Semaphore::new(total_mib as usize)),
            total_mib,
        }
    }

    /// The budget in MiB.
    pub fn total_mib(&self) -> u32 {
        self.total_mib
    }

    /// Reserves a call's memory limit, waiting while the budget is taken; released when the
    /// permit drops. A limit above the whole budget takes the whole budget.
    pub async fn reserve(&self, bytes: usize) -> OwnedSemaphorePermit {
        let mib = u32::try_from(bytes.div_ceil(1 << 20))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total_mib);
        self.permits
            .clone()
            .acquire_many_owned(mib)
            .await
            .expect("the guest memory semaphore is never closed")
    }
}

/// The container's memory limit, from its cgroup (v2, then v1); `None` without one.
pub fn container_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(Path::new(path)).ok())
    .and_then(|text| parse_limit(&text))
}

/// A cgroup memory limit file's value: bytes, or `max` (v2) or a huge number (v1) for none.
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&bytes| bytes < UNLIMITED)
}

/// The budget: `flag_mib` when given (not 0), else the container limit's share.
pub fn budget(flag_mib: u64, container: Option<u64>) -> Option<u64> {
    match flag_mib {
        0 => container.map(|limit| limit / SHARE_OF_LIMIT),
        mib => Some(mib << 20),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_should_come_from_the_flag_or_the_containers_limit() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(
            parse_limit("9223372036854771712"),
            None,
            "cgroup v1's unlimited"
        );
        assert_eq!(
            budget(0, Some(1 << 30)),
            Some(512 << 20),
            "half the chart's 1 GiB"
        );
        assert_eq!(budget(0, None), None);
        assert_eq!(budget(300, Some(1 << 30)), Some(300 << 20));
    }

    #[tokio::test]
    async fn calls_should_wait_while_the_budget_is_taken() {
        let budget = GuestMemory::new(Some(128 << 20));
        let a = budget.reserve(64 << 20).await;
        let _b = budget.reserve(64 << 20).await;
        let third = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(64 << 20).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !third.is_finished(),
            "a third 64 MiB call fits only when one ends"
        );
        drop(a);
        let _third = third.await.unwrap();
        let huge = tokio::time::timeout(std::time::Duration::from_millis(50), async {
            budget.reserve(1 << 30).await
        })
        .await;
        assert!(huge.is_err(), "a limit past the budget waits for all of it");
    }
}
