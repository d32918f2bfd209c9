//! Command-line interface. Flag names follow controller-runtime where the two overlap, so that
//! manifests written for a Go operator carry over.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::selector::Selector;

/// Top-level command line of `reconhost`.
#[derive(Debug, Parser)]
#[command(name = "reconhost", version, about)]
pub struct Cli {
    /// Log format: `human` for a terminal, `json` for a cluster's log pipeline.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true, env = "RECONHOST_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the host against a cluster until SIGTERM or SIGINT.
    // Boxed: its flags outweigh every other command's many times over.
    Run(Box<RunArgs>),
    /// Run a plugin offline on files and print what the host would do.
    Render(RenderArgs),
    /// Publish a plugin and install it through a ReconcilePlugin.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Print the CustomResourceDefinitions the host needs (YAML).
    Crds,
    /// Show a parent as the host sees it: the plugin and digest that last reconciled it, when
    /// and with what outcome, its children and their conditions (messages whole), its events.
    Trace(crate::inspect::TraceCommand),
    /// Show every installed plugin at a glance: state, revisions, how its parents stand.
    Status(crate::inspect::StatusCommand),
    /// Write a new plugin project (Rust, Python or TypeScript) that builds, has a CRD,
    /// fixtures, a unit test and a render test.
    Init(InitArgs),
    /// Compile one component from standard input to standard output: the child process in
    /// which the host compiles plugins under the compile budget. Not for people.
    #[command(hide = true)]
    CompileWorker,
}

/// Arguments of `reconhost init`.
#[derive(Debug, Clone, clap::Args)]
pub struct InitArgs {
    /// The directory to create (it must not exist, or be empty).
    pub dir: PathBuf,
    /// The plugin's language.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The kind the plugin reconciles, CamelCase (e.g. `Widget`).
    #[arg(long)]
    pub kind: String,
    /// The API group of the kind, a DNS subdomain with a dot (e.g. `example.com`).
    #[arg(long)]
    pub group: String,
    /// The API version of the kind.
    #[arg(long, default_value = "v1alpha1")]
    pub version: String,
}

/// Languages `reconhost init` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust with reconhost-sdk (`cargo build --target wasm32-wasip2`).
    Rust,
    /// Python with the reconhost package (componentize-py).
    Python,
    /// TypeScript with @reconhost/sdk (componentize-js).
    Ts,
}

/// `reconhost plugin ...`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Upload the component (to a ConfigMap or an OCI registry) and create or update its
    /// ReconcilePlugin with the component's digest.
    Install(InstallArgs),
    /// Print the ReconcilePlugin (and, for --configmap, the ConfigMap) instead of applying them,
    /// for GitOps.
    Manifest(InstallArgs),
    /// Only upload the component to an OCI registry; print its digest.
    Push(PushArgs),
    /// Print the RBAC the plugin's ServiceAccount needs (a ClusterRole bound where its parents
    /// live) and the ClusterRole that lets the host watch the plugin's kinds, from what the
    /// plugin declares (resolved through the cluster's discovery).
    Rbac(RbacArgs),
    /// Say what a component is and will ask for, before anything is applied: its name,
    /// version, contract and kinds, the RBAC it needs with the dangerous grants named, its size,
    /// and what compiling it costs.
    Inspect(InspectArgs),
    /// List the installed plugins: parent kind, version, readiness, source, ServiceAccount,
    /// and the RBAC objects `install --rbac` made for each (what `uninstall` removes).
    List(ListArgs),
    /// Delete a ReconcilePlugin, wait for the host to release it, then remove what `install`
    /// created for it: its RBAC, its ConfigMap source, its ServiceAccount.
    Uninstall(UninstallArgs),
    /// See and steer a progressive rollout (`spec.rollout.strategy: Progressive`).
    #[command(subcommand)]
    Rollout(RolloutCommand),
}

/// `reconhost plugin rollout ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum RolloutCommand {
    /// Where the rollout stands: the stable and candidate digests, the step, the revisions'
    /// health, what shadow calls found.
    Status(RolloutArgs),
    /// Promote the candidate now: it serves every parent, whatever steps are left.
    Promote(RolloutArgs),
    /// Roll the candidate back now: every parent goes back to the stable revision.
    Abort(RolloutArgs),
    /// Go back to the revision before the active one (from `status.history`): spec.source is
    /// set to it and it serves every parent at once.
    Undo(RolloutArgs),
}

/// Which ReconcilePlugin a rollout command is about.
#[derive(Debug, Clone, clap::Args)]
pub struct RolloutArgs {
    /// The ReconcilePlugin (`kubectl get rp`).
    pub name: String,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Where a plugin's grant applies, and what the installer consents to.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GrantArgs {
    /// A namespace the plugin's parents live in (repeatable, or comma-separated): its grant is
    /// bound there only (a RoleBinding each), and its ReconcilePlugin reconciles parents there
    /// only (`spec.namespaces`). With `--rbac` and without this or `--cluster-wide`: the
    /// kubeconfig context's namespace.
    #[arg(
        long = "parent-namespace",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub parent_namespaces: Vec<String>,
    /// Grant in every namespace (a ClusterRoleBinding) and reconcile parents everywhere.
    #[arg(long, conflicts_with = "parent_namespaces")]
    pub cluster_wide: bool,
    /// Grant rights that reach past reconciling (Secrets, workloads, RBAC, ServiceAccounts,
    /// Namespaces, Leases, webhooks, CRDs, ReconcilePlugins). Without it they are listed and
    /// nothing is granted.
    #[arg(long)]
    pub allow_dangerous: bool,
}

/// Arguments of `reconhost plugin rbac`.
#[derive(Debug, Clone, clap::Args)]
pub struct RbacArgs {
    /// The plugin component (.wasm).
    pub file: PathBuf,
    /// The ServiceAccount the plugin acts as (`namespace/name`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub service_account: String,
    /// Where, and what.
    #[command(flatten)]
    pub grant: GrantArgs,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Arguments of `reconhost plugin inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// The component: a file (.wasm), or an OCI reference (`registry/repository:tag`).
    pub source: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = InspectFormat::Text)]
    pub output: InspectFormat,
    /// How to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Output formats of `plugin inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InspectFormat {
    /// For people.
    Text,
    /// JSON.
    Json,
}

/// Arguments of `reconhost plugin list`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Arguments of `reconhost plugin uninstall`.
#[derive(Debug, Clone, clap::Args)]
pub struct UninstallArgs {
    /// The ReconcilePlugin (`kubectl get rp`).
    pub name: String,
    /// How long to wait for the host to release the ReconcilePlugin (it first releases every
    /// parent). Go duration syntax.
    #[arg(long, default_value = "2m", value_parser = parse_period)]
    pub timeout: Duration,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Where a plugin goes and how it is installed.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    /// The plugin component (.wasm).
    pub file: PathBuf,
    /// Store the component in this ConfigMap (`namespace/name`; the namespace must be the
    /// ServiceAccount's). Up to 1 MiB after gzip.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        conflicts_with = "oci",
        required_unless_present = "oci"
    )]
    pub configmap: Option<String>,
    /// Push the component to this OCI reference (`registry/repository:tag`).
    #[arg(long, value_name = "REFERENCE")]
    pub oci: Option<String>,
    /// The ServiceAccount the plugin acts as (`namespace/name`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub service_account: String,
    /// The plugin's configuration, JSON.
    #[arg(long)]
    pub config: Option<String>,
    /// Reconcile only the parents whose labels match (`kubectl -l` syntax); it becomes the
    /// ReconcilePlugin's `spec.parentSelector`.
    #[arg(long, value_name = "SELECTOR", value_parser = parse_selector)]
    pub parent_selector: Option<Selector>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the plugin's namespace that the host pulls
    /// with (for --oci).
    #[arg(long, requires = "oci")]
    pub pull_secret: Option<String>,
    /// Also apply the RBAC the plugin needs (`reconhost plugin rbac`), and create the
    /// ServiceAccount if it is missing.
    #[arg(long)]
    pub rbac: bool,
    /// Where the plugin's grant applies, and what is consented to.
    #[command(flatten)]
    pub grant: GrantArgs,
    /// With `--rbac`, over an earlier install: grant what the new component asks for beyond
    /// what was granted before. Without it the difference is listed and nothing is changed.
    #[arg(long)]
    pub approve_new_grants: bool,
    /// How to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Path to a kubeconfig (install only). Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Arguments of `reconhost plugin push`.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// The plugin component (.wasm).
    pub file: PathBuf,
    /// The OCI reference to push to (`registry/repository:tag`).
    #[arg(long, value_name = "REFERENCE")]
    pub oci: String,
    /// How to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// How to reach registries.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// A registry (`host:port`) to reach over plain HTTP instead of HTTPS. Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registries: Vec<String>,
    /// User name for the registry (with RECONHOST_REGISTRY_PASSWORD); anonymous without it.
    #[arg(long, env = "RECONHOST_REGISTRY_USERNAME")]
    pub registry_username: Option<String>,
}

/// Arguments of `reconhost render`.
#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// The plugin component (.wasm).
    #[arg(long)]
    pub plugin: PathBuf,
    /// The parent object (YAML or JSON).
    #[arg(long)]
    pub parent: PathBuf,
    /// Objects standing for the observed children (YAML or JSON, multi-document). Repeatable.
    #[arg(long)]
    pub observed: Vec<PathBuf>,
    /// Objects the plugin may read through get and list. Repeatable.
    #[arg(long)]
    pub related: Vec<PathBuf>,
    /// The plugin configuration, JSON.
    #[arg(long)]
    pub config: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Bounds on compiling the plugin.
    #[command(flatten)]
    pub compile: CompileArgs,
}

/// Output formats of `render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Where traces go (`reconhost run`): off unless an endpoint is given here or in the standard
/// OpenTelemetry variables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// Export one OpenTelemetry trace per reconcile that wrote or failed, over OTLP/gRPC, to
    /// this endpoint (e.g. `http://otel-collector:4317`). Default:
    /// $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then $OTEL_EXPORTER_OTLP_ENDPOINT; without any,
    /// tracing is off.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The share of reconciles traced, from 0 to 1. Default: $OTEL_TRACES_SAMPLER_ARG, else 1.
    #[arg(long, value_name = "RATIO", value_parser = parse_ratio)]
    pub trace_sampling_ratio: Option<f64>,
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?} is not a ratio from 0 to 1")),
    }
}

/// Arguments of `reconhost run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Tracing.
    #[command(flatten)]
    pub tracing: TraceArgs,
    /// Path to a kubeconfig. Without it the usual resolution applies: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// A plugin component (.wasm) to run. Repeatable; one plugin per parent kind. Without any,
    /// the host runs the plugins ReconcilePlugin resources install.
    #[arg(long = "plugin")]
    pub plugins: Vec<PathBuf>,
    /// Reconcile only the parents whose labels match (`kubectl -l` syntax: `team=a,env in
    /// (prod)`), for the `--plugin` files; a ReconcilePlugin says it in `spec.parentSelector`.
    #[arg(long, value_name = "SELECTOR", default_value = "", value_parser = parse_selector, requires = "plugins")]
    pub parent_selector: Selector,
    /// Serve only the ReconcilePlugins whose labels match (`kubectl -l` syntax), so that several
    /// hosts share a cluster, one per tenant. A ReconcilePlugin that stops matching is left to
    /// the host it now matches: this one stops serving it without releasing its parents.
    /// Default: every ReconcilePlugin.
    #[arg(long, value_name = "SELECTOR", default_value = "", value_parser = parse_selector)]
    pub plugin_selector: Selector,
    /// Reload a `--plugin` file when it changes (for plugin authors: edit, build, see).
    #[arg(long, requires = "plugins")]
    pub watch: bool,
    /// A registry (`host:port`) plugins are pulled from over plain HTTP instead of HTTPS.
    /// Repeatable. Only the operator decides this; a ReconcilePlugin cannot.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registries: Vec<String>,
    /// A public key (PEM file, cosign's `cosign.pub`) plugins must be signed with. Repeatable;
    /// with any, every plugin must be an OCI artifact whose cosign signature one of them
    /// verifies (a ConfigMap source is refused).
    #[arg(long = "plugin-public-key", value_name = "PEM_FILE")]
    pub plugin_public_keys: Vec<PathBuf>,
    /// Largest plugin component accepted from a source, in bytes (after decompression).
    #[arg(long, default_value_t = crate::source::DEFAULT_MAX_BYTES)]
    pub max_plugin_bytes: usize,
    /// Components compiled at once (compiling is CPU-bound and parallel already).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_compiles: u16,
    /// Bounds on compiling one plugin.
    #[command(flatten)]
    pub compile: CompileArgs,
    /// Elect a leader among the replicas (a Lease): only the leader reconciles; every replica
    /// keeps its caches and plugins warm. controller-runtime's timings: lease 15 s, renew
    /// deadline 10 s, retry 2 s.
    #[arg(long)]
    pub leader_elect: bool,
    /// The namespace of the leader-election Lease. Default: the namespace of the
    /// ServiceAccount the host runs as (in a cluster).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// The name of the leader-election Lease.
    #[arg(long, default_value = "reconhost-leader")]
    pub leader_election_id: String,
    /// Share the parents among every replica (each holds a Lease in the ring; every parent is
    /// reconciled by one live member, chosen by hashing its namespace and name), instead of
    /// one leader reconciling everything. The Leases live in `--leader-election-namespace`.
    #[arg(long, conflicts_with = "leader_elect")]
    pub sharding: bool,
    /// The ring's name: the `reconhost.dev/ring` label on its members' Leases and their names'
    /// prefix. Hosts in different rings share nothing.
    #[arg(long, default_value = "reconhost")]
    pub sharding_ring: String,
    /// How long a leader's or a ring member's Lease lasts without renewal (client-go's
    /// LeaseDuration). Go duration syntax.
    #[arg(long, default_value = "15s", value_parser = parse_period)]
    pub leader_elect_lease_duration: Duration,
    /// How long a leader or a ring member keeps reconciling without renewing its Lease
    /// (client-go's RenewDeadline); must be shorter than the lease duration.
    #[arg(long, default_value = "10s", value_parser = parse_period)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try and Leases are renewed (client-go's RetryPeriod).
    #[arg(long, default_value = "2s", value_parser = parse_period)]
    pub leader_elect_retry_period: Duration,
    /// Let plugins reconcile built-in kinds (ConfigMaps, Deployments, ...), not only custom
    /// resources. A plugin for a built-in kind puts its finalizer and status on every such
    /// object in the cluster.
    #[arg(long)]
    pub allow_builtin_parents: bool,
    /// Let plugins put finalizers on their children. Nothing removes a finalizer a plugin
    /// forgets, and the child (and a parent waiting on it) is never deleted.
    #[arg(long)]
    pub allow_child_finalizers: bool,
    /// How long a plugin's caches may take to hold their first list before its start fails
    /// (controller-runtime's CacheSyncTimeout). Go duration syntax.
    #[arg(long, default_value = "2m", value_parser = parse_period)]
    pub cache_sync_timeout: Duration,
    /// Watch and reconcile only in this namespace (cluster-scoped kinds are watched everywhere).
    /// Without it, all namespaces.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of the Prometheus endpoint (/metrics): `host:port`, or `:port` for every
    /// interface (as controller-runtime reads it); `0` turns it off.
    // Spelled out so that clap takes the parser's `Option` as the value instead of making the
    // flag optional (which would expect the parser to return a bare address).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_optional_bind)]
    pub metrics_bind_address: std::option::Option<SocketAddr>,
    /// Address of the liveness (/healthz) and readiness (/readyz) endpoints: `host:port` or
    /// `:port`.
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = parse_bind)]
    pub health_probe_bind_address: SocketAddr,
    /// Parents one plugin may reconcile at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
    /// Parents all plugins together may reconcile at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_total_reconciles: u16,
    /// Guest memory all plugins' calls may hold at once, in MiB: each call reserves its
    /// plugin's memory limit from it and waits while it is taken. `0`: half the container's
    /// memory limit (its cgroup's), or no bound without one.
    #[arg(long, default_value_t = 0)]
    pub max_guest_memory_mib: u64,
    /// Seconds in-flight reconciles get to finish after SIGTERM before the host exits anyway.
    #[arg(long, default_value_t = 30)]
    pub graceful_shutdown_seconds: u64,
    /// How often every parent is reconciled again although nothing changed (controller-runtime's
    /// SyncPeriod): a safety net, queued at low priority behind watch events and jittered by up
    /// to 10 %. Go duration syntax (`10h`, `90m`, `30s`); `0` turns it off.
    #[arg(long, default_value = "10h", value_parser = parse_period)]
    pub sync_period: Duration,
    /// How long a request to the API server other than a watch may wait for its answer before
    /// it fails (and is retried as any failed request is). The API server ends such requests
    /// itself after 60 s; this bounds the wait when the answer is lost on the way, on a
    /// connection that stalled without closing. Go duration syntax.
    #[arg(long, default_value = "70s", value_parser = parse_period)]
    pub request_timeout: Duration,
    /// How long one watch request lasts before the API server ends it and the host resumes
    /// the watch where it was (kube-runtime's default, 290 s). A watch from which nothing,
    /// not even a bookmark, has arrived for 5 s longer is taken for dead (a connection that
    /// stalled without closing) and started again: this bounds how long a stalled watch can
    /// go unnoticed. Go duration syntax, at least 1 s.
    #[arg(long, default_value = "290s", value_parser = parse_period)]
    pub watch_timeout: Duration,
    /// Times another field manager must undo what a plugin applied to a child, over the same
    /// field, within `--fight-window`, before the host stops re-applying that child (the fight
    /// breaker). The parent then shows `Contested=True` naming the field and the manager.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub fight_threshold: u32,
    /// The window those strikes must fall in; also how long a child must stay quiet after the
    /// host re-applies it before the fight counts as over. Go duration syntax.
    #[arg(long, default_value = "2m", value_parser = parse_period)]
    pub fight_window: Duration,
    /// How long the first trip of the fight breaker keeps the host from re-applying a child;
    /// each further trip doubles it, up to `--fight-max-backoff`. Go duration syntax.
    #[arg(long, default_value = "30s", value_parser = parse_period)]
    pub fight_backoff: Duration,
    /// The longest one trip of the fight breaker holds a child. Go duration syntax.
    #[arg(long, default_value = "10m", value_parser = parse_period)]
    pub fight_max_backoff: Duration,
}

impl RunArgs {
    /// The fight breaker's policy from the `--fight-*` flags.
    pub fn fight_policy(&self) -> crate::controller::fight::FightPolicy {
        crate::controller::fight::FightPolicy {
            threshold: self.fight_threshold,
            window: self.fight_window,
            backoff: self.fight_backoff,
            max_backoff: self.fight_max_backoff.max(self.fight_backoff),
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Coloured, multi-field lines for a terminal.
    Human,
    /// One JSON object per line.
    Json,
}

/// A listen address as Go's net.Listen takes it: `host:port`, or `:port` for every interface.
fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse()
        .map_err(|e| format!("{text:?} is not an address like 127.0.0.1:8080 or :8080: {e}"))
}

/// [`parse_bind`], or `0` for no listener at all.
fn parse_optional_bind(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.trim() == "0" {
        return Ok(None);
    }
    parse_bind(text).map(Some)
}

fn parse_selector(text: &str) -> Result<Selector, String> {
    Selector::parse(text).map_err(|e| e.to_string())
}

/// A period in Go's duration syntax (`10h`, `1h30m`, `45s`), or `0` for none.
fn parse_period(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let period: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration like 10h or 90m: {e}"))?;
    Duration::try_from(period).map_err(|_| format!("{text:?} is negative"))
}

/// Bounds on compiling one plugin (the compiler runs in a child process under them), for `run`
/// and `render`; `plugin` commands compile under the defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct CompileArgs {
    /// Memory one plugin's compilation may use, in MiB (real plugins need about 400). Keep it,
    /// plus the host's own, under the container's memory limit.
    #[arg(long, default_value_t = 768, value_parser = clap::value_parser!(u64).range(16..))]
    pub max_compile_memory_mib: u64,
    /// CPU time one plugin's compilation may use. Go duration syntax.
    #[arg(long, default_value = "120s", value_parser = parse_period)]
    pub max_compile_cpu: Duration,
    /// Wall-clock time one plugin's compilation may take. Go duration syntax.
    #[arg(long, default_value = "180s", value_parser = parse_period)]
    pub compile_timeout: Duration,
}

impl CompileArgs {
    /// The runtime settings these flags make: compiled in a worker of this binary.
    pub fn runtime_config(&self) -> std::io::Result<crate::runtime::RuntimeConfig> {
        let defaults = crate::runtime::CompileBudget::default();
        Ok(crate::runtime::RuntimeConfig {
            compiler: crate::runtime::Compiler::this_binary()?,
            compile_budget: crate::runtime::CompileBudget {
                memory: self.max_compile_memory_mib << 20,
                cpu: self.max_compile_cpu,
                wall: self.compile_timeout,
                ..defaults
            },
            ..crate::runtime::RuntimeConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_should_parse_as_go_durations() {
        assert_eq!(parse_period("10h"), Ok(Duration::from_secs(36_000)));
        assert_eq!(parse_period("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_period("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_period("0"), Ok(Duration::ZERO));
        assert!(parse_period("-5m").unwrap_err().contains("negative"));
        assert!(parse_period("soon").unwrap_err().contains("\"soon\""));
    }

    #[test]
    fn bind_addresses_should_read_like_controller_runtime() {
        assert_eq!(parse_bind(":8080"), Ok("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(
            parse_bind("127.0.0.1:9"),
            Ok("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(parse_bind("[::1]:9"), Ok("[::1]:9".parse().unwrap()));
        assert_eq!(parse_optional_bind("0"), Ok(None));
        assert!(parse_bind("localhost").unwrap_err().contains(":8080"));
    }

    #[test]
    fn the_chart_arguments_should_parse() {
        use clap::{CommandFactory as _, Parser as _};
        Cli::command().debug_assert();
        let parsed = Cli::try_parse_from([
            "reconhost",
            "run",
            "--leader-elect",
            "--metrics-bind-address=:8080",
            "--health-probe-bind-address=:8081",
        ])
        .unwrap();
        let Command::Run(args) = parsed.command else {
            panic!("not run: {parsed:?}")
        };
        assert_eq!(
            args.metrics_bind_address,
            Some("0.0.0.0:8080".parse().unwrap())
        );
        let off = Cli::try_parse_from(["reconhost", "run", "--metrics-bind-address=0"]).unwrap();
        let Command::Run(args) = off.command else {
            panic!("not run")
        };
        assert_eq!(args.metrics_bind_address, None, "0 turns the listener off");
    }
}
