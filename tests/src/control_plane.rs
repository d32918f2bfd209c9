//! Starting and stopping one control plane: etcd, then kube-apiserver, then
//! kube-controller-manager, each waited for before the next, all on free loopback ports.
//!
//! The API server authenticates clients by certificate from a per-run CA, authorizes with RBAC
//! (so impersonated identities get real 403s), signs service-account tokens with a per-run key and
//! writes an audit log of every write request, which tests read to count what the host sent.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::audit::AuditLog;
use crate::binaries::Binaries;
use crate::pki::Pki;
use crate::process::{Component, log_tail};
use crate::{Error, registry};

/// How long each component may take to become ready. On two busy cores a cold kube-apiserver
/// needs 10-30 s; the limit is generous so a slow machine is not mistaken for a broken one.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a component gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The administrator the kubeconfig authenticates as.
pub const ADMIN_USER: &str = "reconhost-admin";

/// Audit policy: one line per write, at Metadata level (who, what, which object, the response
/// code) and nothing for reads, so the log stays small and counting writes is a filter.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"#;

/// Options for [`ControlPlane::start`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Instance name, the run directory's name under [`registry::root`]. Defaults to a name unique
    /// to this process.
    pub name: Option<String>,
    /// CRD files to install before kube-controller-manager starts (see [`crate::crds`]).
    pub crds: Vec<PathBuf>,
    /// Also run an OCI registry on loopback (the distribution registry), its address in the run
    /// directory's `registry` file.
    pub registry: bool,
    /// Also run workloads the way a cluster would without a kubelet: the Deployment and
    /// ReplicaSet controllers, kube-scheduler, and kwok with one fake node whose pods report
    /// Running and Ready.
    pub workloads: bool,
    /// More kube-apiserver flags, after the harness's own (a repeated flag's last value wins).
    pub api_server_args: Vec<String>,
}

/// A running control plane. Dropping it stops every component and removes its run directory.
pub struct ControlPlane {
    /// The run directory: pki/, etcd/, logs/, kubeconfig, audit.log.
    dir: PathBuf,
    /// `https://127.0.0.1:<port>`.
    server: String,
    /// Started components in start order; stopped in reverse.
    components: Vec<Component>,
    /// How kube-apiserver was started (binary, arguments), to start it again the same way.
    api_server: (PathBuf, Vec<String>),
    /// How etcd was started, likewise; it starts again on its data directory.
    etcd: (PathBuf, Vec<String>),
    /// etcd's client port.
    etcd_port: u16,
    /// The trace receiver the API server exports to (and hosts under test may).
    _traces: Option<crate::otlp::Sink>,
}

/// Where etcd sits in [`ControlPlane::components`].
const ETCD: usize = 0;

/// Where kube-apiserver sits in [`ControlPlane::components`].
const API_SERVER: usize = 1;

/// How a component is taken down for a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, as a rolling upgrade does: the component shuts down in order.
    Graceful,
    /// SIGKILL, as when its machine dies: nothing is flushed or closed.
    Kill,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager and waits until the API server is
    /// ready. Stale instances left by killed runs are cleaned up first.
    pub async fn start(options: Options) -> Result<Self, Error> {
        let binaries = Binaries::locate()?;
        for dir in registry::reap_all_stale()? {
            tracing::info!(dir = %dir.display(), "removed a stale control plane");
        }
        let name = options
            .name
            .unwrap_or_else(|| format!("run-{}", std::process::id()));
        let dir = registry::claim(&name)?;
        let mut plane = Self {
            dir: dir.clone(),
            server: String::new(),
            components: Vec::new(),
            api_server: (binaries.kube_apiserver.clone(), Vec::new()),
            etcd: (binaries.etcd.clone(), Vec::new()),
            etcd_port: 0,
            _traces: None,
        };
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;

        let pki = Pki::generate(&dir.join("pki"))?;
        let admin = pki.issue_client(ADMIN_USER, &["system:masters"])?;
        write(&pki.path("admin.crt"), &admin.cert_pem)?;
        write(&pki.path("admin.key"), &admin.key_pem)?;

        let [etcd_port, peer_port, api_port] = free_ports()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            "--name=reconhost".to_owned(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=reconhost={peer_url}"),
            // Test data is thrown away with the run; fsync would only slow every write.
            "--unsafe-no-fsync=true".to_owned(),
            "--auto-compaction-retention=1".to_owned(),
            "--quota-backend-bytes=8589934592".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        plane.spawn("etcd", &binaries.etcd, &etcd_args, &logs)?;
        plane.wait_ready(ETCD, || etcd_healthy(etcd_port)).await?;
        plane.etcd = (binaries.etcd.clone(), etcd_args);
        plane.etcd_port = etcd_port;

        write(&dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        // The API server traces only requests that carry a sampled `traceparent` (no sampling
        // rate of its own): a host exporting traces gets the API server's spans for its writes
        // in its reconciles' traces, and nothing else is traced.
        let sink = crate::otlp::start(&crate::otlp::file_in(&dir)).await?;
        write(&dir.join("otlp"), &sink.address().to_string())?;
        write(
            &dir.join("tracing.yaml"),
            &format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: {}\n",
                sink.address()
            ),
        )?;
        plane._traces = Some(sink);
        plane.server = format!("https://127.0.0.1:{api_port}");
        let p = |f: &str| pki.path(f).display().to_string();
        let api_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", pki.dir.display()),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-issuer={}", plane.server),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--service-account-key-file={}", p("sa.pub")),
            // Scale tests create thousands of Services; a /24 runs out at 254.
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            "--authorization-mode=RBAC".to_owned(),
            "--allow-privileged=true".to_owned(),
            // Pods would otherwise need a `default` ServiceAccount that only a full KCM creates.
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            // There are no real endpoints for the `kubernetes` Service on loopback.
            "--endpoint-reconciler-type=none".to_owned(),
            "--profiling=false".to_owned(),
            format!(
                "--audit-policy-file={}",
                dir.join("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", dir.join("audit.log").display()),
            "--audit-log-format=json".to_owned(),
            "--audit-log-mode=blocking".to_owned(),
            format!(
                "--tracing-config-file={}",
                dir.join("tracing.yaml").display()
            ),
            // The log rotates at this size (100 MB when unset), and readers count writes from
            // the one file: 10 GB is more than any run writes (a 10,000-parent benchmark
            // writes about 50 MB at the Metadata level).
            "--audit-log-maxsize=10240".to_owned(),
            // Scale tests create thousands of objects from one client.
            "--max-requests-inflight=1000".to_owned(),
            "--max-mutating-requests-inflight=500".to_owned(),
        ];
        let api_args: Vec<String> = api_args
            .into_iter()
            .chain(options.api_server_args.iter().cloned())
            .collect();
        plane.spawn("kube-apiserver", &binaries.kube_apiserver, &api_args, &logs)?;
        plane.api_server.1 = api_args;
        write(
            &plane.kubeconfig(),
            &kubeconfig_json(&plane.server, &pki, "admin"),
        )?;
        plane.wait_api_ready().await?;
        let client = plane.client().await?;
        crate::crds::install(&client, &options.crds).await?;

        // The aggregation controller fills ClusterRoles that select others by label, as the
        // chart's role for the kinds plugins use does.
        let controllers = if options.workloads {
            "garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller"
        } else {
            "garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller"
        };
        let kcm_args = vec![
            format!("--kubeconfig={}", plane.kubeconfig().display()),
            "--leader-elect=false".to_owned(),
            format!("--controllers={controllers}"),
            "--secure-port=0".to_owned(),
            "--use-service-account-credentials=false".to_owned(),
            "--kube-api-qps=100".to_owned(),
            "--kube-api-burst=200".to_owned(),
        ];
        plane.spawn(
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            &kcm_args,
            &logs,
        )?;
        if options.registry {
            plane.start_registry(&logs).await?;
        }
        if options.workloads {
            plane.start_workloads(&logs, &client).await?;
        }
        plane.check_alive()?;
        Ok(plane)
    }

    /// The distribution registry on a free loopback port, storing under the run directory.
    async fn start_registry(&mut self, logs: &Path) -> Result<(), Error> {
        let program = Binaries::tool("registry")?;
        let data = self.dir.join("registry-data");
        std::fs::create_dir_all(&data).map_err(io(format!("creating {}", data.display())))?;
        let [port] = free_ports()?;
        let address = format!("127.0.0.1:{port}");
        let config = self.dir.join("registry.yaml");
        write(
            &config,
            &format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp: {{addr: {address}}}\n",
                data.display()
            ),
        )?;
        let args = vec!["serve".to_owned(), config.display().to_string()];
        // distribution v3 exports OpenTelemetry traces by default; nothing listens for them here.
        let env = [("OTEL_TRACES_EXPORTER".to_owned(), "none".to_owned())];
        let component = Component::spawn_with_env("registry", &program, &args, &env, logs)?;
        if let Some(pid) = component.pid() {
            registry::record_component(&self.dir, "registry", pid)?;
        }
        self.components.push(component);
        let index = self.components.len() - 1;
        self.wait_ready(index, || registry_ready(port)).await?;
        write(&self.dir.join("registry"), &address)
    }

    /// kube-scheduler and kwok, and the fake node they run pods on.
    async fn start_workloads(&mut self, logs: &Path, client: &kube::Client) -> Result<(), Error> {
        let scheduler = Binaries::tool("kube-scheduler")?;
        let kubeconfig = self.kubeconfig().display().to_string();
        let args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
        ];
        self.spawn("kube-scheduler", &scheduler, &args, logs)?;
        let kwok = Binaries::tool("kwok")?;
        let stages = Binaries::dir().join("kwok-stages.yaml");
        let args = vec![
            format!("--kubeconfig={kubeconfig}"),
            // How the fake node becomes Ready and how pods on it run (tools/k8s/build.sh).
            format!("--config={}", stages.display()),
            "--manage-all-nodes=false".to_owned(),
            format!("--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake"),
            "--cidr=10.244.0.0/16".to_owned(),
            "--node-ip=10.0.0.2".to_owned(),
        ];
        self.spawn("kwok", &kwok, &args, logs)?;
        crate::workloads::create_fake_node(client, FAKE_NODE_ANNOTATION).await
    }

    /// Stops kube-apiserver (SIGTERM, as a rolling upgrade does), keeps it down for `down`, and
    /// starts it again on the same port with the same flags; returns once it is ready. etcd keeps
    /// running, so every object survives; every client connection and watch is cut, and a watch
    /// that resumes from a resourceVersion older than the new server's watch cache is told 410
    /// Gone and must relist.
    pub async fn restart_api_server(&mut self, down: Duration) -> Result<(), Error> {
        self.restart_api_server_after(Stop::Graceful, down, |_| {})
            .await
    }

    /// Like [`ControlPlane::restart_api_server`], stopped as `how` says, and calling `meanwhile`
    /// while it is down (to compact etcd, say).
    pub async fn restart_api_server_after(
        &mut self,
        how: Stop,
        down: Duration,
        meanwhile: impl FnOnce(&Self),
    ) -> Result<(), Error> {
        self.take_down(API_SERVER, how);
        tokio::time::sleep(down).await;
        meanwhile(self);
        let (program, args) = self.api_server.clone();
        self.bring_up(API_SERVER, "kube-apiserver", &program, &args)?;
        self.wait_api_ready().await
    }

    /// Kills etcd (SIGKILL), keeps it down for `down`, and starts it again on its data
    /// directory and port. kube-apiserver keeps running and reconnects by itself; until it
    /// has, every request fails and every watch is cut. Returns once etcd is healthy and the
    /// API server ready again.
    pub async fn restart_etcd(&mut self, how: Stop, down: Duration) -> Result<(), Error> {
        self.take_down(ETCD, how);
        tokio::time::sleep(down).await;
        let (program, args) = self.etcd.clone();
        self.bring_up(ETCD, "etcd", &program, &args)?;
        let port = self.etcd_port;
        self.wait_ready(ETCD, || etcd_healthy(port)).await?;
        self.wait_api_ready().await
    }

    /// Compacts etcd's history up to its current revision, physically, through etcd's JSON
    /// gateway: a watch resuming from any earlier resourceVersion is then answered 410 Gone.
    /// Returns the revision compacted at.
    pub fn compact_etcd(&self) -> Result<i64, Error> {
        let port = self.etcd_port;
        // A range over one key answers with the store's current revision in its header.
        let range = etcd_post(port, "/v3/kv/range", r#"{"key":"Lw=="}"#)?;
        let revision = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse::<i64>().ok())
            .ok_or_else(|| {
                Error::Setup(format!("etcd answered a range without a revision: {range}"))
            })?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        etcd_post(port, "/v3/kv/compaction", &body)?;
        Ok(revision)
    }

    fn take_down(&mut self, index: usize, how: Stop) {
        match how {
            Stop::Graceful => self.components[index].stop(STOP_GRACE),
            Stop::Kill => self.components[index].kill(),
        }
    }

    /// Starts component `index` again, keeping its previous log beside the new one.
    fn bring_up(
        &mut self,
        index: usize,
        name: &'static str,
        program: &Path,
        args: &[String],
    ) -> Result<(), Error> {
        let logs = self.dir.join("logs");
        let log = logs.join(format!("{name}.log"));
        let _ = std::fs::rename(&log, logs.join(format!("{name}.previous.log")));
        let component = Component::spawn(name, program, args, &logs)?;
        if let Some(pid) = component.pid() {
            registry::record_component(&self.dir, name, pid)?;
        }
        self.components[index] = component;
        Ok(())
    }

    async fn wait_api_ready(&mut self) -> Result<(), Error> {
        let port = self
            .server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the server URL ends in its port");
        let client = self.client().await?;
        self.wait_ready_async(API_SERVER, || api_ready(client.clone(), port))
            .await
    }

    fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[String],
        logs: &Path,
    ) -> Result<(), Error> {
        let component = Component::spawn(name, program, args, logs)?;
        if let Some(pid) = component.pid() {
            registry::record_component(&self.dir, name, pid)?;
        }
        self.components.push(component);
        Ok(())
    }

    /// Polls a blocking probe until it succeeds, failing early if the component exits.
    async fn wait_ready(&mut self, index: usize, probe: impl Fn() -> bool) -> Result<(), Error> {
        self.wait_ready_async(index, || std::future::ready(probe()))
            .await
    }

    async fn wait_ready_async<F: Future<Output = bool>>(
        &mut self,
        index: usize,
        probe: impl Fn() -> F,
    ) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            self.components[index].check_alive()?;
            if probe().await {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                let component = &self.components[index];
                let log = component.log().to_owned();
                return Err(Error::NotReady {
                    component: component.name(),
                    seconds: READY_TIMEOUT.as_secs(),
                    tail: log_tail(&log),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails with the component's log if any component has exited.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        self.components
            .iter_mut()
            .try_for_each(Component::check_alive)
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The absolute path of the administrator kubeconfig (usable with kubectl).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The registry's address (`127.0.0.1:<port>`), if one runs.
    pub fn registry(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("registry")).ok()
    }

    /// The audit log of write requests.
    pub fn audit_log(&self) -> AuditLog {
        AuditLog::new(self.dir.join("audit.log"))
    }

    /// Process ids of the running components, in start order.
    pub fn pids(&self) -> Vec<u32> {
        self.components.iter().filter_map(Component::pid).collect()
    }

    /// A client authenticated as the administrator.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        crate::cluster::client_from_kubeconfig(&self.kubeconfig()).await
    }

    /// Stops every component (newest first) and removes the run directory.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        while let Some(mut component) = self.components.pop() {
            component.stop(STOP_GRACE);
        }
        if std::env::var_os("RECONHOST_KEEP_RUN_DIR").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))
}

/// Free loopback ports, as envtest finds them: bind port 0 and read back what the kernel chose.
/// All listeners are held until every port is known, so the ports are distinct.
fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("finding a free loopback port".into()))?;
    let ports: Vec<u16> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok().map(|a| a.port()))
        .collect();
    ports.try_into().map_err(|_| Error::Io {
        what: "reading back a loopback port".into(),
        source: std::io::Error::other("no local address"),
    })
}

/// The annotation that tells kwok which nodes are its own.
const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// Whether the registry answers its API root (`GET /v2/` is 200 without authentication).
fn registry_ready(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200")
}

/// etcd's /health endpoint over plain HTTP/1.0: a few bytes, so no HTTP client is needed.
fn etcd_healthy(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

/// A JSON POST to etcd's gRPC gateway; its answer, parsed.
fn etcd_post(port: u16, path: &str, body: &str) -> Result<serde_json::Value, Error> {
    use std::io::{Read as _, Write as _};
    let io = |source| Error::Io {
        what: format!("POST {path} to etcd"),
        source,
    };
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(io)?;
    let (head, answer) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(Error::Setup(format!(
            "etcd answered {path} with {head}: {answer}"
        )));
    }
    serde_json::from_str(answer)
        .map_err(|e| Error::Setup(format!("etcd answered {path} with no JSON ({e}): {answer}")))
}

async fn api_ready(client: kube::Client, port: u16) -> bool {
    // Until the port accepts connections every request would only log a connect error.
    if TcpStream::connect(("127.0.0.1", port)).is_err() {
        return false;
    }
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("static request");
    matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
}

/// A kubeconfig as JSON (valid YAML, read by kubectl and kube alike) that points at the
/// certificate files, so it stays small and readable.
fn kubeconfig_json(server: &str, pki: &Pki, user: &str) -> String {
    let p = |f: &str| pki.path(f).display().to_string();
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "reconhost", "cluster": {"server": server, "certificate-authority": p("ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": p("admin.crt"), "client-key": p("admin.key")}}],
        "contexts": [{"name": "reconhost", "context": {"cluster": "reconhost", "user": user}}],
        "current-context": "reconhost",
    });
    serde_json::to_string_pretty(&config).expect("a JSON value always serializes")
}
