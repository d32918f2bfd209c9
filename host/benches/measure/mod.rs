//! What the cluster benchmarks (converge, fleet, scale, rollout) read about their processes from /proc —
//! resident memory, CPU time, the TCP connections each holds to the API server — and how they
//! print a side-by-side comparison.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// Summed over a set of processes at one moment.
pub struct ProcessSample {
    /// Resident memory now (VmRSS), MiB.
    pub rss: f64,
    /// The anonymous part of it (RssAnon): heap, stacks, instance memory; not code or other
    /// file pages the kernel can drop and read again.
    pub anon: f64,
    /// Peak resident memory (VmHWM), MiB.
    pub peak: f64,
    /// User and system CPU time so far.
    pub cpu: Duration,
    /// Established TCP connections to the API server's port.
    pub connections: usize,
}

impl ProcessSample {
    /// Reads every process in `pids`; `port` is the API server's.
    pub fn take(pids: &[u32], port: u16) -> Self {
        let mut sample = Self {
            rss: 0.0,
            anon: 0.0,
            peak: 0.0,
            cpu: Duration::ZERO,
            connections: 0,
        };
        for &pid in pids {
            let [peak, rss, anon] = memory_mib(pid);
            sample.rss += rss;
            sample.anon += anon;
            sample.peak += peak;
            sample.cpu += cpu_time(pid);
            sample.connections += connections_to(pid, port);
        }
        sample
    }
}

/// Peak, current and anonymous resident memory of a process, in MiB.
pub fn memory_mib(pid: u32) -> [f64; 3] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    [field("VmHWM:"), field("VmRSS:"), field("RssAnon:")]
}

/// User plus system CPU time of a process (all its threads).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields after it are space-separated. utime and
    // stime are fields 14 and 15 of the line, so 12 and 13 after the name.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / per_second as f64)
}

/// Established TCP connections a process holds to `port` on loopback: its socket inodes
/// (/proc/<pid>/fd) matched against the connection tables.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address rem_address st ... inode (field 9)
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == "01" && remote_port == Some(port) && inodes.contains(*inode) {
                count += 1;
            }
        }
    }
    count
}

/// The API server's port, from the first cluster's `server` in a kubeconfig (YAML or JSON).
pub fn api_server_port(kubeconfig: &Path) -> u16 {
    let text = std::fs::read_to_string(kubeconfig).expect("the kubeconfig");
    let config: serde_json::Value = serde_saphyr::from_str(&text).expect("a kubeconfig");
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("a server in the kubeconfig");
    server
        .trim_end_matches('/')
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .expect("a server URL with a port")
}

/// Prints a process's ten mappings with the most resident memory (from /proc/<pid>/smaps), to
/// see where a host's memory goes.
pub fn print_largest_mappings(pid: u32) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut mappings: Vec<(u64, String)> = Vec::new();
    let mut header = String::new();
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Rss:") {
            let kib = kib
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .unwrap_or(0);
            mappings.push((kib, header.clone()));
        } else if line
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-'))
        {
            header = line.to_owned();
        }
    }
    mappings.sort_by_key(|m| std::cmp::Reverse(m.0));
    let total: u64 = mappings.iter().map(|m| m.0).sum();
    println!(
        "largest mappings of {pid} ({} MiB resident in all):",
        total / 1024
    );
    for (kib, header) in mappings.iter().take(10) {
        println!("  {:>8} KiB  {header}", kib);
    }
    // The same by what is mapped: each compiled plugin (`.cwasm`) counted under one line, so
    // the plugins' share shows beside the host binary's and the anonymous memory.
    let mut by_kind: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
    for (kib, header) in &mappings {
        let path = header.split_whitespace().nth(5).unwrap_or("[anonymous]");
        let kind = if path.ends_with(".cwasm") {
            "compiled plugins (*.cwasm)".to_owned()
        } else if path.starts_with("/memfd:") {
            "memfd (memory images)".to_owned()
        } else {
            path.to_owned()
        };
        let entry = by_kind.entry(kind).or_default();
        entry.0 += kib;
        entry.1 += 1;
    }
    let mut by_kind: Vec<_> = by_kind.into_iter().collect();
    by_kind.sort_by_key(|(_, (kib, _))| std::cmp::Reverse(*kib));
    println!("resident by what is mapped:");
    for (kind, (kib, count)) in by_kind.iter().take(8) {
        println!("  {kib:>8} KiB  {kind} ({count} mappings)");
    }
}

/// The median of some figures (the mean of the middle two for an even count; 0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Prints a Markdown table of `(figure, ours, baseline)` rows with their ratio.
pub fn side_by_side(ours: &str, baseline: &str, rows: &[(&str, f64, f64)]) {
    println!("| | {ours} | {baseline} | ours / baseline |");
    println!("|---|---|---|---|");
    for (name, h, o) in rows {
        let ratio = if *o == 0.0 {
            "-".to_owned()
        } else {
            format!("{:.3}", h / o)
        };
        println!("| {name} | {h:.1} | {o:.1} | {ratio} |");
    }
}
