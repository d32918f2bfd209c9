//! `reconhost trace <kind>/<name>` and `reconhost status`: what the host did, read back from the
//! cluster, for people. Also `kubectl reconhost ...`: the binary installed (or linked) as
//! `kubectl-reconhost` on the PATH is a kubectl plugin.
//!
//! Nothing here asks the host: everything shown is what the cluster holds (the parent and its
//! children, their conditions, the host's [`LastReconcile`](crate::model::record) annotation,
//! the ReconcilePlugin's status, events.k8s.io), so it works from any machine with a
//! kubeconfig, against any number of host replicas. Messages are shown whole: a cut message
//! (Crossplane's trace cuts them at 64 characters) is the one thing a person reading this
//! cannot work around.

use std::path::PathBuf;

use clap::ValueEnum;

mod gather;
mod status;
mod tree;

/// The name under which the binary is a kubectl plugin (`kubectl reconhost ...`).
pub const KUBECTL_PLUGIN: &str = "kubectl-reconhost";

/// How `trace` and `status` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    /// For people: a tree (`trace`) or a table (`status`).
    #[default]
    Tree,
    /// JSON, for scripts.
    Json,
}

/// Arguments of `reconhost trace`.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceCommand {
    /// The parent, `<kind>/<name>`: the kind as kubectl takes it (`webapp`, `webapps`,
    /// `WebApp`, `webapps.examples.reconhost.dev`).
    pub parent: String,
    /// Its namespace. Default: the kubeconfig context's. Ignored for a cluster-scoped kind.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Tree)]
    pub output: Output,
    /// How many of its most recent events to show.
    #[arg(long, default_value_t = 10)]
    pub events: usize,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Arguments of `reconhost status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusCommand {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Tree)]
    pub output: Output,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// The command line, parsed. Invoked as [`KUBECTL_PLUGIN`] (kubectl runs `kubectl reconhost
/// ...` that way), help and errors name the command as it was typed: `kubectl reconhost`.
pub fn parse_cli() -> crate::cli::Cli {
    use clap::{CommandFactory as _, FromArgMatches as _, Parser as _};
    let invoked = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| path.file_name().map(|n| n.to_owned()));
    if invoked.as_deref() != Some(std::ffi::OsStr::new(KUBECTL_PLUGIN)) {
        return crate::cli::Cli::parse();
    }
    let matches = crate::cli::Cli::command()
        .bin_name("kubectl reconhost")
        .get_matches();
    crate::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Runs `reconhost trace`: the text to print.
pub async fn trace(args: &TraceCommand) -> anyhow::Result<String> {
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let traced = gather::trace(&client, &args.parent, &namespace, args.events).await?;
    Ok(match args.output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&traced)?),
        Output::Tree => tree::render(&traced),
    })
}

/// Runs `reconhost status`: the text to print.
pub async fn status(args: &StatusCommand) -> anyhow::Result<String> {
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let plugins = status::gather(&client).await?;
    Ok(match args.output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&plugins)?),
        Output::Tree => status::table(&plugins),
    })
}
