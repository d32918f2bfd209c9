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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(2),
            memory: 64 << 20,
            response_bytes: 4 << 20,
            children: 1000,
            log_bytes: 64 << 10,
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

    /// Sets the log volume per call in bytes.
    #[must_use]
    pub fn log_bytes(mut self, bytes: usize) -> Self {
        self.log_bytes = bytes;
        self
    }
}
