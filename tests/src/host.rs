//! A `reconhost run` process for the control-loop tests and benchmarks: started against the test
//! control plane, scoped to one namespace so tests sharing the control plane do not reconcile
//! each other's objects, with JSON logs in a file and its metrics and probes on free ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::Error;
use crate::cgroup::{CpuQuota, MemoryLimit};
use crate::process::Component;

/// How to start a host.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The `reconhost` binary.
    pub binary: PathBuf,
    /// The kubeconfig of the control plane.
    pub kubeconfig: PathBuf,
    /// The only namespace it watches; empty for all of them.
    pub namespace: String,
    /// Plugin components.
    pub plugins: Vec<PathBuf>,
    /// Where its log goes: a directory several hosts may share (replicas in one namespace);
    /// each host's file is `<log_dir>/host-<k>/reconhost.log`, in a subdirectory it claims.
    pub log_dir: PathBuf,
    /// More arguments for `reconhost run`.
    pub args: Vec<String>,
    /// Environment variables (`RUST_LOG`, for one).
    pub env: Vec<(String, String)>,
    /// A memory limit for the host and what it starts (a cgroup, as a container's), in bytes.
    pub memory_limit: Option<u64>,
    /// A CPU quota for the host and what it starts (a cgroup, as a container's CPU limit), in
    /// thousandths of one CPU. On cgroup v2, not together with `memory_limit`.
    pub cpu_millicores: Option<u64>,
}

/// A running host. Dropping it stops it (SIGTERM, then SIGKILL).
pub struct Host {
    process: Component,
    metrics: u16,
    probes: u16,
    /// Dropped after the process, so the cgroup is empty when it is removed.
    memory: Option<MemoryLimit>,
    /// Likewise.
    cpu: Option<CpuQuota>,
}

impl Host {
    /// Starts the host and waits until /readyz answers 200 (its caches are synced).
    pub async fn start(options: &HostOptions) -> Result<Self, Error> {
        let [metrics, probes] = free_ports()?;
        let mut args = vec![
            "--log-format=json".to_owned(),
            "run".to_owned(),
            format!("--kubeconfig={}", options.kubeconfig.display()),
            format!("--metrics-bind-address=127.0.0.1:{metrics}"),
            format!("--health-probe-bind-address=127.0.0.1:{probes}"),
        ];
        if !options.namespace.is_empty() {
            args.push(format!("--namespace={}", options.namespace));
        }
        args.extend(
            options
                .plugins
                .iter()
                .map(|p| format!("--plugin={}", p.display())),
        );
        args.extend(options.args.iter().cloned());
        let log_dir = claim_log_dir(&options.log_dir)?;
        let name = format!("host-{}-{metrics}", std::process::id());
        if options.memory_limit.is_some()
            && options.cpu_millicores.is_some()
            && crate::cgroup::is_v2()
        {
            return Err(Error::Setup(
                "a memory limit and a CPU quota together need cgroup v1 (on v2 a process is in \
                 one cgroup)"
                    .into(),
            ));
        }
        let memory = options
            .memory_limit
            .map(|bytes| MemoryLimit::new(&name, bytes))
            .transpose()?;
        let cpu = options
            .cpu_millicores
            .map(|millicores| CpuQuota::new(&format!("cpu-{name}"), millicores))
            .transpose()?;
        let mut procs: Vec<PathBuf> = memory.iter().map(MemoryLimit::procs).collect();
        procs.extend(cpu.iter().flat_map(CpuQuota::procs));
        let process = Component::spawn_in(
            "reconhost",
            &options.binary,
            &args,
            &options.env,
            &log_dir,
            &procs,
        )?;
        let mut host = Self {
            process,
            metrics,
            probes,
            memory,
            cpu,
        };
        host.wait_ready(Duration::from_secs(120)).await?;
        Ok(host)
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            self.process.check_alive()?;
            if let Ok((200, _)) = http_get(self.probes, "/readyz").await {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(Error::NotReady {
                    component: "reconhost",
                    seconds: timeout.as_secs(),
                    log: self.process.log().to_owned(),
                    tail: crate::process::log_tail(self.process.log()),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether /readyz answers 200 now.
    pub async fn is_ready(&self) -> bool {
        matches!(http_get(self.probes, "/readyz").await, Ok((200, _)))
    }

    /// The text of /metrics.
    pub async fn metrics(&self) -> Result<String, Error> {
        let (code, body) = http_get(self.metrics, "/metrics").await?;
        if code != 200 {
            return Err(Error::Setup(format!("/metrics answered {code}: {body}")));
        }
        Ok(body)
    }

    /// The host's log lines, parsed (it logs JSON).
    pub fn logs(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.process.log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The log file.
    pub fn log_file(&self) -> &Path {
        self.process.log()
    }

    /// Fails with the tail of its log if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        self.process.check_alive()
    }

    /// The memory cgroup it runs in, if it was started with a limit.
    pub fn memory(&self) -> Option<&MemoryLimit> {
        self.memory.as_ref()
    }

    /// The CPU cgroup it runs in, if it was started with a quota.
    pub fn cpu(&self) -> Option<&CpuQuota> {
        self.cpu.as_ref()
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Stops it with SIGTERM (a graceful shutdown), waiting up to `grace`.
    pub fn stop(mut self, grace: Duration) {
        self.process.stop(grace);
    }

    /// Kills it with SIGKILL: no graceful shutdown, as when a node dies.
    pub fn kill(mut self) {
        if let Some(pid) = self.process.pid() {
            // SAFETY: a plain system call on our own, not yet reaped, child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        self.process.stop(Duration::from_secs(5));
    }
}

/// A subdirectory of `dir` no other host writes to: two hosts writing one log file (each from
/// offset 0, without `O_APPEND`) would overwrite each other's lines.
fn claim_log_dir(dir: &Path) -> Result<PathBuf, Error> {
    let io = |what: &Path, source| Error::Io {
        what: format!("creating {}", what.display()),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for k in 1.. {
        let claimed = dir.join(format!("host-{k}"));
        match std::fs::create_dir(&claimed) {
            Ok(()) => return Ok(claimed),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&claimed, e)),
        }
    }
    unreachable!("an unbounded range")
}

/// The value of a sample in Prometheus text: `name` with every given label, or `None`.
pub fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (labels_part, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let (l, v) = r.split_once('}')?;
                (l, v)
            }
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let all = labels
            .iter()
            .all(|(k, v)| labels_part.contains(&format!("{k}=\"{v}\"")));
        all.then(|| value.split_whitespace().next()?.parse().ok())
            .flatten()
    })
}

/// N distinct loopback ports free at the moment of the call.
pub fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    let io = |source| Error::Io {
        what: "finding a free loopback port".into(),
        source,
    };
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(io)?.port();
    }
    Ok(ports)
}

/// A plain HTTP/1.0 GET on loopback: status and body.
/// `GET http://127.0.0.1:<port><path>`: the status code and the body.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), Error> {
    let io = |source| Error::Io {
        what: format!("GET 127.0.0.1:{port}{path}"),
        source,
    };
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(io)?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(io)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.map_err(io)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}
