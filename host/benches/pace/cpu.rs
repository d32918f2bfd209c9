//! CPU time from /proc: the benchmark's own process (the generator, the watches, the creator),
//! the host, the control plane (kube-apiserver, etcd, kube-controller-manager) and the whole
//! machine — on a small machine they share the cores, so where the CPU went says who waited
//! for whom, and whether someone else's work was in the way.

use std::path::Path;

use crate::measure::cpu_time;
use std::time::Duration;

/// CPU time of the processes a variant involves, at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// This process.
    pub bench: Duration,
    /// The host, when one runs.
    pub host: Duration,
    /// The control plane.
    pub plane: Duration,
    /// Every process on the machine (/proc/stat): what is left after the three above is
    /// someone else's, which the figures of a shared machine should be read with.
    pub machine: Duration,
}

impl Cpu {
    /// Reads the CPU time of this process, `host` and `plane`'s processes.
    pub fn take(host: Option<u32>, plane: &[u32]) -> Self {
        Self {
            bench: cpu_time(std::process::id()),
            host: host.map_or(Duration::ZERO, cpu_time),
            plane: plane.iter().map(|&pid| cpu_time(pid)).sum(),
            machine: machine_time(),
        }
    }

    /// What processes other than the benchmark, the host and the control plane used.
    pub fn others(self) -> Duration {
        self.machine
            .saturating_sub(self.bench + self.host + self.plane)
    }

    /// What was used from `earlier` to `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            bench: self.bench.saturating_sub(earlier.bench),
            host: self.host.saturating_sub(earlier.host),
            plane: self.plane.saturating_sub(earlier.plane),
            machine: self.machine.saturating_sub(earlier.machine),
        }
    }
}

/// CPU time every processor spent busy since boot: user, nice, system, irq, softirq and steal
/// from the first line of /proc/stat.
fn machine_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| matches!(i, 0 | 1 | 2 | 5 | 6 | 7))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks())
}

/// Clock ticks per second, the unit of /proc's CPU times.
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// The control plane's processes: kube-apiserver, etcd and kube-controller-manager whose
/// command line names the run directory of `kubeconfig` (where their certificates and data
/// are), so another instance on the machine is not counted.
pub fn control_plane(kubeconfig: &Path) -> Vec<u32> {
    let dir = kubeconfig
        .parent()
        .expect("the run directory")
        .to_string_lossy()
        .into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        // comm is cut at 15 bytes: `kube-controller`.
        if !matches!(comm.trim(), "kube-apiserver" | "etcd" | "kube-controller") {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&dir) {
            pids.push(pid);
        }
    }
    pids
}
