//! What a plugin's store holds, and the host imports (`log`, `get`, `list`) it serves.
//!
//! One [`State`] per instance, and one instance per call: nothing a plugin does in one call can be
//! seen by the next.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, format_err};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::v0_1::{self, types};
use super::bindings::v0_2;
use super::limits::Limits;
use super::reads::{NoObjects, ObjectReader, Read};
use crate::model::KindRef;
use crate::selector::Selector;

/// Store data of one plugin instance.
pub struct State {
    /// WASI with no capabilities: no preopened directories, no environment, no arguments, no
    /// sockets; stdout and stderr are bounded in-memory pipes.
    wasi: WasiCtx,
    /// WASI's resource table.
    table: ResourceTable,
    /// Memory cap enforcement; remembers whether it refused a growth.
    pub(super) memory: MemoryLimiter,
    /// The plugin's stdout, read after the call.
    pub(super) stdout: MemoryOutputPipe,
    /// The plugin's stderr, read after the call (a Rust panic message lands here).
    pub(super) stderr: MemoryOutputPipe,
    /// Name of the plugin, for log lines.
    plugin: Arc<str>,
    /// Kinds the plugin declared in `reads`.
    allowed_reads: Arc<[KindRef]>,
    /// Where reads are answered from during the current call.
    pub(super) reader: Arc<dyn ObjectReader>,
    /// `get` and `list` calls made so far in this call, and the bytes they returned: the host's
    /// own work for a call is bounded too ([`MAX_READ_CALLS`], [`MAX_READ_BYTES`]).
    read_calls: usize,
    read_bytes: usize,
    /// Set when a call went past a read bound: the trap that follows is that, not a bug.
    pub(super) read_exceeded: Option<String>,
    /// What the current call read.
    pub(super) reads: Vec<Read>,
    /// Bytes logged so far in this call, through `host.log`.
    pub(super) logged: usize,
    /// Log budget for the call; exceeding it traps the call.
    log_limit: usize,
    /// Set when the log budget was exceeded, to classify the resulting trap.
    pub(super) log_exceeded: bool,
    /// `namespace/name` of the parent of the current call, for log lines.
    pub(super) parent: String,
}

impl State {
    /// A fresh state with the plugin's limits.
    pub fn new(plugin: Arc<str>, allowed_reads: Arc<[KindRef]>, limits: &Limits) -> Self {
        let stdout = MemoryOutputPipe::new(limits.log_bytes);
        let stderr = MemoryOutputPipe::new(limits.log_bytes);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryLimiter {
                limit: limits.memory,
                denied: false,
                peak: 0,
            },
            stdout,
            stderr,
            plugin,
            allowed_reads,
            reader: Arc::new(NoObjects),
            read_calls: 0,
            read_bytes: 0,
            read_exceeded: None,
            reads: Vec::new(),
            logged: 0,
            log_limit: limits.log_bytes,
            log_exceeded: false,
            parent: String::new(),
        }
    }

    fn allowed(&self, kind: &KindRef) -> Result<(), types::ReadError> {
        if self
            .allowed_reads
            .iter()
            .any(|k| k.matches(&kind.api_version, &kind.kind))
        {
            Ok(())
        } else {
            Err(types::ReadError::NotAllowed(format!(
                "{kind} is not among the kinds plugin {} declared in reads",
                self.plugin
            )))
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Enforces the memory cap and records whether it had to.
pub(super) struct MemoryLimiter {
    limit: usize,
    /// A growth was refused during this instance's life.
    pub(super) denied: bool,
    /// Largest linear memory seen, in bytes.
    pub(super) peak: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.denied = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million entries is far beyond any real plugin.
        Ok(desired <= 1_000_000)
    }
}

fn kind_of(kind: types::KindRef) -> KindRef {
    KindRef {
        api_version: kind.api_version,
        kind: kind.kind,
    }
}

impl types::Host for State {}

impl v0_1::Host for State {
    fn log(&mut self, level: types::Level, message: String) -> wasmtime::Result<()> {
        self.logged += message.len();
        if self.logged > self.log_limit {
            self.log_exceeded = true;
            return Err(format_err!(
                "log volume of the call exceeded {} bytes",
                self.log_limit
            ));
        }
        let (plugin, parent) = (&*self.plugin, self.parent.as_str());
        let message = crate::model::printable(&message, MAX_LOG_LINE);
        match level {
            types::Level::Trace => tracing::trace!(plugin, parent, "{message}"),
            types::Level::Debug => tracing::debug!(plugin, parent, "{message}"),
            types::Level::Info => tracing::info!(plugin, parent, "{message}"),
            types::Level::Warn => tracing::warn!(plugin, parent, "{message}"),
            types::Level::Error => tracing::error!(plugin, parent, "{message}"),
        }
        Ok(())
    }

    fn get(
        &mut self,
        kind: types::KindRef,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<Option<String>, types::ReadError>> {
        let _span = tracing::debug_span!(target: "reconhost::trace", "read.get",
            kind = %format_args!("{}/{}", kind.api_version, kind.kind), %namespace, %name)
        .entered();
        self.count_read()?;
        let kind = kind_of(kind);
        if let Err(e) = self
            .allowed(&kind)
            .and_then(|()| arguments(&namespace, &name, ""))
        {
            return Ok(Err(e));
        }
        let found = match self.reader.get(&kind, &namespace, &name) {
            Ok(found) => found,
            Err(refused) => return Ok(Err(types::ReadError::NotAllowed(refused.0))),
        };
        self.count_bytes(found.as_ref().map_or(0, String::len))?;
        self.reads.push(Read::Get {
            kind,
            namespace,
            name,
        });
        Ok(Ok(found))
    }

    fn list(
        &mut self,
        kind: types::KindRef,
        namespace: String,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, types::ReadError>> {
        let _span = tracing::debug_span!(target: "reconhost::trace", "read.list",
            kind = %format_args!("{}/{}", kind.api_version, kind.kind), %namespace,
            selector = %label_selector)
        .entered();
        self.count_read()?;
        let kind = kind_of(kind);
        if let Err(e) = self
            .allowed(&kind)
            .and_then(|()| arguments(&namespace, "", &label_selector))
        {
            return Ok(Err(e));
        }
        let selector = match Selector::parse(&label_selector) {
            Ok(s) => s,
            Err(e) => return Ok(Err(types::ReadError::Invalid(e.to_string()))),
        };
        let found = match self.reader.list(&kind, &namespace, &selector) {
            Ok(found) => found,
            Err(refused) => return Ok(Err(types::ReadError::NotAllowed(refused.0))),
        };
        self.count_bytes(found.iter().map(String::len).sum())?;
        self.reads.push(Read::List {
            kind,
            namespace,
            selector: label_selector,
        });
        Ok(Ok(found))
    }
}

impl v0_2::types::Host for State {}

/// 0.2's imports are 0.1's: the same functions over the same types, generated apart.
impl v0_2::Host for State {
    fn log(&mut self, level: v0_2::types::Level, message: String) -> wasmtime::Result<()> {
        use v0_2::types::Level as L;
        let level = match level {
            L::Trace => types::Level::Trace,
            L::Debug => types::Level::Debug,
            L::Info => types::Level::Info,
            L::Warn => types::Level::Warn,
            L::Error => types::Level::Error,
        };
        v0_1::Host::log(self, level, message)
    }

    fn get(
        &mut self,
        kind: v0_2::types::KindRef,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<Option<String>, v0_2::types::ReadError>> {
        let found = v0_1::Host::get(self, kind_1(kind), namespace, name)?;
        Ok(found.map_err(read_error_2))
    }

    fn list(
        &mut self,
        kind: v0_2::types::KindRef,
        namespace: String,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, v0_2::types::ReadError>> {
        let found = v0_1::Host::list(self, kind_1(kind), namespace, label_selector)?;
        Ok(found.map_err(read_error_2))
    }
}

fn kind_1(kind: v0_2::types::KindRef) -> types::KindRef {
    types::KindRef {
        api_version: kind.api_version,
        kind: kind.kind,
    }
}

fn read_error_2(e: types::ReadError) -> v0_2::types::ReadError {
    match e {
        types::ReadError::NotAllowed(m) => v0_2::types::ReadError::NotAllowed(m),
        types::ReadError::Invalid(m) => v0_2::types::ReadError::Invalid(m),
        types::ReadError::Other(m) => v0_2::types::ReadError::Other(m),
    }
}

/// Longest log line forwarded from a plugin, in bytes; longer ones are cut.
pub const MAX_LOG_LINE: usize = 4096;

/// Reads one call may make. A reconcile that needs more than this many lookups is better served
/// by one `list`; a plugin looping over `get` would otherwise keep a host thread busy and grow
/// the dependency records without bound.
pub const MAX_READ_CALLS: usize = 1000;

/// Bytes the reads of one call may return in all: every returned object is a copy the host
/// makes into the instance, so this bounds the host's memory for the call as the memory cap
/// bounds the guest's.
pub const MAX_READ_BYTES: usize = 64 << 20;

/// Longest label selector accepted, in bytes (a selector is parsed and kept for dependency
/// tracking).
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// Arguments of a read that cannot name an object are refused before any lookup.
fn arguments(namespace: &str, name: &str, selector: &str) -> Result<(), types::ReadError> {
    if namespace.len() > 63 {
        return Err(types::ReadError::Invalid(format!(
            "namespace of {} bytes: a namespace is a DNS label of at most 63",
            namespace.len()
        )));
    }
    if name.len() > 253 {
        return Err(types::ReadError::Invalid(format!(
            "name of {} bytes: a name is at most 253",
            name.len()
        )));
    }
    if selector.len() > MAX_SELECTOR_BYTES {
        return Err(types::ReadError::Invalid(format!(
            "label selector of {} bytes, more than {MAX_SELECTOR_BYTES}",
            selector.len()
        )));
    }
    Ok(())
}

impl State {
    fn count_read(&mut self) -> wasmtime::Result<()> {
        self.read_calls += 1;
        if self.read_calls > MAX_READ_CALLS {
            let what = format!("more than {MAX_READ_CALLS} get and list calls");
            self.read_exceeded = Some(what.clone());
            return Err(format_err!("{what}"));
        }
        Ok(())
    }

    fn count_bytes(&mut self, bytes: usize) -> wasmtime::Result<()> {
        self.read_bytes += bytes;
        if self.read_bytes > MAX_READ_BYTES {
            let what = format!("reads returning more than {MAX_READ_BYTES} bytes");
            self.read_exceeded = Some(what.clone());
            return Err(format_err!("{what}"));
        }
        Ok(())
    }
}
