//! A memory cgroup for one process tree: how the tests hold a host to the memory limit the chart
//! gives its container (a kubelet does the same with the pod's cgroup), so that what a hostile
//! plugin makes the host allocate is judged against the real bound. The process and everything
//! it starts afterwards are in it; the kernel's out-of-memory killer acts inside it alone.
//!
//! Needs root and a writable cgroup filesystem: v1's memory hierarchy, or v2 with the memory
//! controller enabled for children of the root.

use std::path::{Path, PathBuf};

use crate::Error;

const V1: &str = "/sys/fs/cgroup/memory";
const V2: &str = "/sys/fs/cgroup";

/// A memory cgroup, removed on drop (once its processes are gone).
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    v2: bool,
}

impl MemoryLimit {
    /// A new cgroup `name` limited to `bytes` of memory (no swap is counted on this machine).
    pub fn new(name: &str, bytes: u64) -> Result<Self, Error> {
        let v2 = Path::new(V2).join("cgroup.controllers").is_file();
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
