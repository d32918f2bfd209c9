//! Per-plugin limits, with documented defaults.

use std::time::Duration;

/// What one plugin call may use. Exceeding any limit fails that call with a typed error; the
/// host and every other plugin carry on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline of one call, measured in epoch ticks of [`super::EPOCH_TICK`].
    /// Default 2 s, as Kubewarden. A reconcile is a pure function of its input; a second is
    /// already generous.
    pub deadline: Duration,
    /// Maximum linear memory of one instance, in bytes. Default 64 MiB: a Rust plugin needs a
    /// few hundred KiB; interpreted languages (Python, JS) need 16-64 MiB.
    pub memory: usize,
    /// Maximum total size of a response (children, status, conditions, events), in bytes.
    /// Default 4 MiB: larger than the API server's 1.5 MiB object limit times a few children,
    /// small enough to keep a bad plugin from flooding the host.
    pub response_bytes: usize,
    /// Maximum number of desired children. Default 1000.
    pub children: usize,
    /// Maximum bytes a call may send through `host.log`, and separately through each of stdout
    /// and stderr. Default 64 KiB.
    pub log_bytes: usize,
    /// Whether desired children may carry finalizers. Default no: a finalizer nothing removes
    /// keeps the child, and with `blockOwnerDeletion` its parent, from ever being deleted.
    pub child_finalizers: bool,
    /// How long a parent being deleted waits for the plugin to finish its cleanup, counted
    /// from its `deletionTimestamp`; after that the host removes its finalizer anyway, with a
    /// Warning event. Default 10 minutes.
    pub finalize_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(2),
            memory: 64 << 20,
            response_bytes: 4 << 20,
            children: 1000,
            log_bytes: 64 << 10,
            child_finalizers: false,
            finalize_timeout: Duration::from_secs(600),
        }
    }
}

impl Limits {
    /// Sets the call deadline.
    ///
    /// ## Warning
    /// The deadline is enforced at epoch-tick granularity (10 ms), so a call may run up to one
    /// tick longer. Zero means one tick.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets the memory cap in bytes.
    ///
    /// ## Warning
    /// Language runtimes allocate their heap at start-up; a cap below a few MiB makes a Python
    /// or JS plugin fail every call.
    #[must_use]
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = bytes;
        self
    }

    /// Sets the maximum response size in bytes.
    #[must_use]
    pub fn response_bytes(mut self, bytes: usize) -> Self {
        self.response_bytes = bytes;
        self
    }

    /// Sets the maximum number of children.
    #[must_use]
    pub fn children(mut self, count: usize) -> Self {
        self.children = count;
        self
    }

    /// Allows children to carry finalizers.
    ///
    /// ## Warning
    /// A plugin can then keep children, and parents waiting on them, from ever being deleted.
    #[must_use]
    pub fn child_finalizers(mut self, allowed: bool) -> Self {
        self.child_finalizers = allowed;
        self
    }

    /// Sets how long a deleted parent waits for the plugin's cleanup.
    ///
    /// ## Warning
    /// A cleanup cut short may leave what the plugin manages outside the cluster behind.
    #[must_use]
    pub fn finalize_timeout(mut self, timeout: Duration) -> Self {
        self.finalize_timeout = timeout;
        self
    }

    /// Sets the log volume per call in bytes.
    #[must_use]
    pub fn log_bytes(mut self, bytes: usize) -> Self {
        self.log_bytes = bytes;
        self
    }
}
