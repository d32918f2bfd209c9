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
        let kind = kind_of(kind);
        if let Err(e) = self.allowed(&kind) {
            return Ok(Err(e));
        }
        let found = self.reader.get(&kind, &namespace, &name);
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
        let kind = kind_of(kind);
        if let Err(e) = self.allowed(&kind) {
            return Ok(Err(e));
        }
        let selector = match Selector::parse(&label_selector) {
            Ok(s) => s,
            Err(e) => return Ok(Err(types::ReadError::Invalid(e.to_string()))),
        };
        let found = self.reader.list(&kind, &namespace, &selector);
        self.reads.push(Read::List {
            kind,
            namespace,
            selector: label_selector,
        });
        Ok(Ok(found))
    }
}
