//! Logging set-up. `RUST_LOG` filters as usual; the default shows the host's own info lines and
//! warnings from dependencies.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global tracing subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,reconhost=info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
