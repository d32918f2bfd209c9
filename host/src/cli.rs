//! Command-line interface. Flag names follow controller-runtime where the two overlap, so that
//! manifests written for a Go operator carry over.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

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
    Run(RunArgs),
    /// Run a plugin offline on files and print what the host would do.
    Render(RenderArgs),
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
}

/// Output formats of `render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Arguments of `reconhost run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Path to a kubeconfig. Without it the usual resolution applies: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// A plugin component (.wasm) to run. Repeatable; one plugin per parent kind.
    #[arg(long = "plugin", required = true)]
    pub plugins: Vec<PathBuf>,
    /// Watch and reconcile only in this namespace (cluster-scoped kinds are watched everywhere).
    /// Without it, all namespaces.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of the Prometheus endpoint (/metrics); `0` turns it off.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_bind_address: String,
    /// Address of the liveness (/healthz) and readiness (/readyz) endpoints.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub health_probe_bind_address: SocketAddr,
    /// Parents one plugin may reconcile at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
    /// Parents all plugins together may reconcile at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_total_reconciles: u16,
    /// Seconds in-flight reconciles get to finish after SIGTERM before the host exits anyway.
    #[arg(long, default_value_t = 30)]
    pub graceful_shutdown_seconds: u64,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Coloured, multi-field lines for a terminal.
    Human,
    /// One JSON object per line.
    Json,
}
