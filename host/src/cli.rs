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
}

/// Arguments of `reconhost run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Path to a kubeconfig. Without it the usual resolution applies: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the liveness (/healthz) and readiness (/readyz) endpoints.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub health_probe_bind_address: SocketAddr,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Coloured, multi-field lines for a terminal.
    Human,
    /// One JSON object per line.
    Json,
}
