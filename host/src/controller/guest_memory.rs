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

/// The container's memory limit, from its cgroup; `None` without one: the lowest limit from
/// the process's own memory cgroup (`/proc/self/cgroup`) up to the hierarchy's root. So it holds
/// in a container (whose cgroup namespace or mount shows its cgroup as the root), in a systemd
/// unit with `MemoryMax=`, or in any cgroup a supervisor made, under cgroup v2 (`memory.max`)
/// and v1 (`memory.limit_in_bytes`).
pub fn container_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").is_file();
    let (root, file) = match v2 {
        true => ("/sys/fs/cgroup", "memory.max"),
        false => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
    };
    let path = own_cgroup(&own, v2).unwrap_or("/");
    lowest_along(Path::new(root), path, file, read)
}

/// The process's cgroup path in `proc_self_cgroup`: the v2 line (`0::/path`), or the v1 line of
/// the memory controller (`4:memory:/path`).
fn own_cgroup(proc_self_cgroup: &str, v2: bool) -> Option<&str> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match v2 {
            true => controllers.is_empty(),
            false => controllers.split(',').any(|c| c == "memory"),
        };
        ours.then_some(path.trim())
    })
}

/// The lowest limit in `file` on the way from `root`/`path` up to `root`, each read with `read`.
/// Levels that do not exist (the host's path of a container whose mount starts at its own
/// cgroup) are passed over.
fn lowest_along(
    root: &Path,
    path: &str,
    file: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    let mut dir = root.join(path.trim_start_matches('/'));
    let mut lowest: Option<u64> = None;
    loop {
        if let Some(limit) = read(&dir.join(file)).and_then(|text| parse_limit(&text)) {
            lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return lowest;
        }
    }
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

    #[test]
    fn the_limit_should_be_the_lowest_from_the_processs_cgroup_up() {
        let root = Path::new("/sys/fs/cgroup");
        let files = |path: &Path| -> Option<String> {
            match path.to_str()? {
                "/sys/fs/cgroup/system.slice/memory.max" => Some("2147483648\n".into()),
                "/sys/fs/cgroup/system.slice/host.service/memory.max" => Some("max\n".into()),
                "/sys/fs/cgroup/system.slice/host.service/worker/memory.max" => {
                    Some("1073741824\n".into())
                }
                _ => None,
            }
        };
        let lowest = |path: &str| lowest_along(root, path, "memory.max", files);
        assert_eq!(
            lowest("/system.slice/host.service"),
            Some(2 << 30),
            "a parent's limit holds for its children"
        );
        assert_eq!(lowest("/system.slice/host.service/worker"), Some(1 << 30));
        assert_eq!(lowest("/"), None);
        let container = |p: &Path| {
            (p == Path::new("/sys/fs/cgroup/memory.max")).then(|| "536870912".to_owned())
        };
        assert_eq!(
            lowest_along(root, "/kubepods/pod-x/c-y", "memory.max", container),
            Some(512 << 20),
            "a container's mount starts at its own cgroup: the host's path is not there"
        );

        let v1 = "9:name=systemd:/\n4:memory,hugetlb:/process_api/x\n0::/\n";
        assert_eq!(own_cgroup(v1, false), Some("/process_api/x"));
        assert_eq!(own_cgroup(v1, true), Some("/"));
        assert_eq!(own_cgroup("0::/a/b\n", true), Some("/a/b"));
        assert_eq!(own_cgroup("0::/a/b\n", false), None);
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
