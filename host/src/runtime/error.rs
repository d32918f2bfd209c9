//! Typed errors of the plugin runtime. Each names the plugin (and for calls the parent) and
//! says what happened in words an operator can act on.

use std::path::PathBuf;
use std::time::Duration;

use crate::model::PluginError;

/// Loading a plugin failed; the plugin is not started.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The component file could not be read.
    #[error("reading plugin {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid WebAssembly component, or compiling them failed.
    #[error("compiling plugin {origin} (sha256 {digest}): {message}")]
    Compile {
        /// Where the component came from.
        origin: String,
        /// Its sha256.
        digest: String,
        /// wasmtime's explanation.
        message: String,
    },
    /// Compiling the component would take more than the host allows: too many functions, too
    /// large a function, or the compiler process ran out of its memory, CPU or time budget.
    /// The same bytes fail the same way again, so the host does not retry them.
    #[error("compiling plugin {origin} (sha256 {digest}) was stopped: {what}")]
    OverBudget {
        /// Where the component came from.
        origin: String,
        /// Its sha256.
        digest: String,
        /// Which bound it hit, with the bound.
        what: String,
    },
    /// The component was built for a contract version this host does not implement.
    #[error(
        "plugin {origin} uses contract {found}, which this host does not implement (it implements {supported})"
    )]
    UnsupportedContract {
        /// Where the component came from.
        origin: String,
        /// The `reconhost:plugin` version it imports or exports.
        found: String,
        /// What the host supports.
        supported: &'static str,
    },
    /// The component does not implement the `reconciler` world (a missing or mistyped export,
    /// or an import the host does not provide).
    #[error("plugin {origin} does not implement the reconhost:plugin/reconciler world: {message}")]
    NotAReconciler {
        /// Where the component came from.
        origin: String,
        /// What is missing or wrong.
        message: String,
    },
    /// Calling `info` failed (trap, deadline, memory).
    #[error("calling info() of plugin {origin}: {source}")]
    Info {
        /// Where the component came from.
        origin: String,
        /// Why the call failed.
        #[source]
        source: Box<CallError>,
    },
    /// `info` returned something unusable.
    #[error("plugin {origin} declared an invalid {field}: {reason}")]
    InvalidInfo {
        /// Where the component came from.
        origin: String,
        /// The field, e.g. `name`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The compiled-code cache could not be used.
    #[error("compiled-code cache {}: {message}", path.display())]
    Cache {
        /// The cache file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// One plugin call failed. The host and every other plugin carry on.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin} reconciling {parent}: {kind}")]
pub struct CallError {
    /// The plugin's name.
    pub plugin: String,
    /// `namespace/name` of the parent (empty for `info`).
    pub parent: String,
    /// What happened.
    pub kind: CallErrorKind,
    /// What the call read before the plugin reported its error: a plugin that fails because an
    /// object it needs is missing or wrong is woken when that object changes, not only by the
    /// backoff. Empty when the call trapped or broke a limit.
    pub reads: Vec<super::reads::Read>,
}

/// What made a call fail.
#[derive(Debug, thiserror::Error)]
pub enum CallErrorKind {
    /// The call ran past its deadline and was interrupted.
    #[error("deadline of {} ms exceeded", .0.as_millis())]
    Deadline(Duration),
    /// The plugin tried to grow its memory past the cap.
    #[error("memory limit of {limit} bytes exceeded")]
    MemoryLimit {
        /// The cap in bytes.
        limit: usize,
    },
    /// The plugin logged (or printed) more than its per-call budget.
    #[error("log limit of {limit} bytes per call exceeded")]
    LogLimit {
        /// The budget in bytes.
        limit: usize,
    },
    /// The plugin read more, or more often, than one call may.
    #[error("read limit exceeded: {what}")]
    ReadLimit {
        /// Which bound.
        what: String,
    },
    /// The plugin trapped: a panic, an uncaught exception, a stack overflow, an unreachable
    /// instruction. The plugin's own words come first, because they name the bug in the
    /// author's terms (`KeyError: 'missing'`); the wasm trap, which says only how the language
    /// runtime gave up, follows in parentheses.
    #[error("{}", trap_display(message, trap))]
    Trap {
        /// What the plugin said as it failed: a panic's message, an exception's last line
        /// (`KeyError: 'missing'`). Empty when it printed nothing (a stack overflow).
        message: String,
        /// The trap (wasm `unreachable` instruction executed), then the rest of what the plugin
        /// printed on stderr last (a traceback's frames, the panic's location) after
        /// `; plugin stderr: `, lines joined by ` | `, language runtimes' own notices left out.
        /// A `Box<str>`: with a second `String` here the variant would be as large as
        /// `InvalidResponse`, and every call's `Result` larger (clippy's `result_large_err`).
        trap: Box<str>,
    },
    /// The response is larger than allowed.
    #[error("response of {bytes} bytes exceeds the limit of {limit} bytes")]
    ResponseTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The response has more children than allowed.
    #[error("{count} children exceed the limit of {limit}")]
    TooManyChildren {
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// Something in the response breaks the contract.
    #[error("invalid response at {path}: {reason}")]
    InvalidResponse {
        /// Where, e.g. `children[2].metadata.namespace`.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The plugin reported an error of its own.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The host failed to set up the call (a bug or exhaustion of the instance pool).
    #[error("host error: {0}")]
    Host(String),
}

/// `KeyError: 'missing' (trapped: wasm `unreachable` instruction executed; plugin stderr: ...)`,
/// or `trapped: ...` when the plugin said nothing.
fn trap_display(message: &str, trap: &str) -> String {
    if message.is_empty() {
        format!("trapped: {trap}")
    } else {
        format!("{message} (trapped: {trap})")
    }
}

impl CallErrorKind {
    /// Every [`Self::label`], so that metrics can start each at 0.
    pub const LABELS: [&'static str; 11] = [
        "deadline",
        "memory",
        "log",
        "read_limit",
        "trap",
        "response_too_large",
        "too_many_children",
        "invalid_response",
        "transient",
        "permanent",
        "host",
    ];

    /// A short stable label for metrics and conditions (`deadline`, `memory`, `trap`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Deadline(_) => "deadline",
            Self::MemoryLimit { .. } => "memory",
            Self::LogLimit { .. } => "log",
            Self::ReadLimit { .. } => "read_limit",
            Self::Trap { .. } => "trap",
            Self::ResponseTooLarge { .. } => "response_too_large",
            Self::TooManyChildren { .. } => "too_many_children",
            Self::InvalidResponse { .. } => "invalid_response",
            Self::Plugin(PluginError::Transient(_)) => "transient",
            Self::Plugin(PluginError::Permanent(_)) => "permanent",
            Self::Host(_) => "host",
        }
    }

    /// Whether retrying the same input can succeed. Limits, traps and invalid responses are
    /// properties of the plugin and the input; only transient and host errors are worth a retry
    /// with backoff. (The control loop still retries with backoff, so a plugin fixed by an
    /// upgrade recovers.)
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Plugin(PluginError::Permanent(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_should_list_every_kinds_label() {
        let every = [
            CallErrorKind::Deadline(Duration::ZERO),
            CallErrorKind::MemoryLimit { limit: 0 },
            CallErrorKind::LogLimit { limit: 0 },
            CallErrorKind::ReadLimit {
                what: String::new(),
            },
            CallErrorKind::Trap {
                message: String::new(),
                trap: "".into(),
            },
            CallErrorKind::ResponseTooLarge { bytes: 0, limit: 0 },
            CallErrorKind::TooManyChildren { count: 0, limit: 0 },
            CallErrorKind::InvalidResponse {
                path: String::new(),
                reason: String::new(),
            },
            CallErrorKind::Plugin(PluginError::Transient(String::new())),
            CallErrorKind::Plugin(PluginError::Permanent(String::new())),
            CallErrorKind::Host(String::new()),
        ];
        let labels: Vec<&str> = every.iter().map(CallErrorKind::label).collect();
        assert_eq!(labels, CallErrorKind::LABELS);
    }
}
