//! Cgroups for one process tree, as a container's: a memory limit (what a hostile plugin makes
//! the host allocate is judged against the chart's real bound) and a CPU quota (so that a host,
//! not the control plane beside it, is what runs out, as a container's CPU limit makes it). The
//! process and everything it starts afterwards are in them; the kernel's out-of-memory killer
//! acts inside the memory cgroup alone, and CFS throttles the CPU cgroup's threads once they
//! used their quota in a period.
//!
//! Needs root and a writable cgroup filesystem: v1's memory, cpu and cpuacct hierarchies, or v2
//! with the memory and cpu controllers enabled for children of the root
//! (`/sys/fs/cgroup/cgroup.subtree_control`). On v2 a process is in one cgroup only, so a host
//! gets either limit there, not both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Error;

const V1: &str = "/sys/fs/cgroup/memory";
const V2: &str = "/sys/fs/cgroup";
/// v1's CPU bandwidth hierarchy (`cpu`, or `cpu,cpuacct` behind a symlink of that name).
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
/// v1's CPU accounting hierarchy: the same directory as [`V1_CPU`] when they are co-mounted.
const V1_CPUACCT: &str = "/sys/fs/cgroup/cpuacct";
/// The CFS period a [`CpuQuota`] is enforced over, in microseconds (the kernel's default): the
/// quota is a share of each 100 ms, so a host over it waits out the rest of that period.
const CPU_PERIOD_US: u64 = 100_000;

/// How many plain processes' share of a busy CPU a [`CpuQuota`] weighs (v1 `cpu.shares` of
/// 1024 each, v2 `cpu.weight` of 100 each). It bounds nothing: the quota does.
pub const CPU_WEIGHT: u64 = 10;

/// Whether this machine mounts the unified hierarchy (v2) rather than v1's.
pub fn is_v2() -> bool {
    Path::new(V2).join("cgroup.controllers").is_file()
}

/// A memory cgroup, removed on drop (once its processes are gone).
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    v2: bool,
}

impl MemoryLimit {
    /// A new cgroup `name` limited to `bytes` of memory (no swap is counted on this machine).
    pub fn new(name: &str, bytes: u64) -> Result<Self, Error> {
        let v2 = is_v2();
        let root = if v2 { V2 } else { V1 };
        let dir = Path::new(root).join(format!("reconhost-{name}"));
        let fail = |what: &str, source: std::io::Error| Error::Io {
            what: format!(
                "{what} {} (holding a host to a memory limit needs root and a writable memory cgroup)",
                dir.display()
            ),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(|e| fail("creating", e))?;
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(dir.join(file), bytes.to_string()).map_err(|e| fail("limiting", e))?;
        Ok(Self { dir, v2 })
    }

    /// The file a process writes its pid (or `0`, itself) to, to join the cgroup.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// How many processes the out-of-memory killer has killed in the cgroup.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The most memory the cgroup has held at once, in bytes (0 where the kernel does not say).
    pub fn peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // A process that was just killed may take a moment to leave.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A CPU cgroup held to a quota of CPU time per CFS period (100 ms), removed on drop (once its
/// processes are gone). What it reports covers every process in it, children included.
#[derive(Debug)]
pub struct CpuQuota {
    /// v2: the one cgroup. v1: the `cpu` hierarchy's, then the `cpuacct` one's if that is
    /// mounted apart.
    dirs: Vec<PathBuf>,
    v2: bool,
}

/// How often a [`CpuQuota`] held its processes back, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttling {
    /// CFS periods in which its processes wanted to run.
    pub periods: u64,
    /// Of those, the periods in which they used up the quota and were stopped.
    pub throttled: u64,
    /// How long they were stopped in all.
    pub time: Duration,
}

impl CpuQuota {
    /// A new cgroup `name` allowed `millicores` thousandths of one CPU (300: 30 ms of each
    /// 100 ms period, whatever the number of threads; at least 10, the kernel's least quota).
    /// It weighs as [`CPU_WEIGHT`] plain processes, so that it gets its quota on a machine busy
    /// with other work: the quota, not the neighbours, is what holds it back.
    pub fn new(name: &str, millicores: u64) -> Result<Self, Error> {
        let v2 = is_v2();
        let roots: Vec<PathBuf> = if v2 {
            vec![V2.into()]
        } else {
            let cpu = Path::new(V1_CPU);
            let acct = Path::new(V1_CPUACCT);
            let same = acct.canonicalize().ok() == cpu.canonicalize().ok();
            if same || !acct.is_dir() {
                vec![cpu.into()]
            } else {
                vec![cpu.into(), acct.into()]
            }
        };
        let dirs: Vec<PathBuf> = roots
            .iter()
            .map(|r| r.join(format!("reconhost-{name}")))
            .collect();
        let fail = |what: &str, dir: &Path, source: std::io::Error| Error::Io {
            what: format!(
                "{what} {} (holding a host to a CPU quota needs root and a writable cpu cgroup{})",
                dir.display(),
                if v2 {
                    "; on v2, `+cpu` in /sys/fs/cgroup/cgroup.subtree_control"
                } else {
                    ""
                }
            ),
            source,
        };
        for dir in &dirs {
            std::fs::create_dir_all(dir).map_err(|e| fail("creating", dir, e))?;
        }
        let quota = (millicores.max(1) * CPU_PERIOD_US / 1000).max(1000);
        let cpu = &dirs[0];
        let write = |file: &str, value: String| {
            std::fs::write(cpu.join(file), value).map_err(|e| fail("limiting", cpu, e))
        };
        if v2 {
            write("cpu.max", format!("{quota} {CPU_PERIOD_US}"))?;
            write("cpu.weight", (100 * CPU_WEIGHT).to_string())?;
        } else {
            write("cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", quota.to_string())?;
            write("cpu.shares", (1024 * CPU_WEIGHT).to_string())?;
        }
        Ok(Self { dirs, v2 })
    }

    /// The files a process writes its pid (or `0`, itself) to, to join the cgroup: one per
    /// hierarchy on v1.
    pub fn procs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The CPU time its processes have used (user and system), living or exited.
    pub fn usage(&self) -> Duration {
        if self.v2 {
            let micros = self.stat("usage_usec");
            Duration::from_micros(micros)
        } else {
            let acct = self.dirs.last().expect("a cgroup");
            let nanos = std::fs::read_to_string(acct.join("cpuacct.usage"))
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            Duration::from_nanos(nanos)
        }
    }

    /// How often the quota held its processes back so far.
    pub fn throttling(&self) -> Throttling {
        Throttling {
            periods: self.stat("nr_periods"),
            throttled: self.stat("nr_throttled"),
            time: if self.v2 {
                Duration::from_micros(self.stat("throttled_usec"))
            } else {
                Duration::from_nanos(self.stat("throttled_time"))
            },
        }
    }

    /// A field of the `cpu` controller's `cpu.stat` (0 where the kernel does not say).
    fn stat(&self, field: &str) -> u64 {
        std::fs::read_to_string(self.dirs[0].join("cpu.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        for dir in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
