//! A loaded plugin: compiled once, type-checked once (`InstancePre`), and called in a fresh
//! instance every time.
//!
//! Fresh instances are made ahead of need: a background thread fills a small per-plugin pool
//! when the plugin loads, and afterwards each call makes its own replacement. The hot path only
//! takes a pristine instance and calls it; [`Plugin::reconcile_then`] hands the result over
//! before the used instance is torn down (its memory reset) and before the replacement is made,
//! both on the caller's thread, where the caches are warm (the refill thread's instances were
//! measured slower to call: docs/BENCHMARKS.md). Each instance serves exactly one call and is
//! never returned to the pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Engine, Store, Trap};

use super::code_cache::{Provenance, sha256_hex};
use super::contract::{self, Contract, Instance, Pre};
use super::engine::{EPOCH_TICK, Runtime};
use super::error::{CallError, CallErrorKind, LoadError};
use super::limits::Limits;
use super::reads::{ObjectReader, Read};
use super::state::{MAX_LOG_LINE, State};
use super::validate::{check_info, response_size, validate};
use crate::model::MAX_CONDITION_MESSAGE;
use crate::model::{KindRef, PluginError, PluginInfo, ReconcileRequest, object_ref, printable};

pub use contract::SUPPORTED as SUPPORTED_CONTRACTS;

/// How many pristine instances each plugin keeps ready. Each call makes its replacement right
/// after it, so one worker never runs dry; two cover two workers calling at once (a third
/// instantiates inline, a few microseconds more); more only hold memory.
const WARM_INSTANCES: usize = 2;

/// A plugin ready to be called. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<Inner>,
}

struct Inner {
    prepared: Arc<Prepared>,
    /// Pristine instances, made ahead of need.
    warm: Mutex<Receiver<Warm>>,
    /// Where replacements go.
    refill: SyncSender<Warm>,
    /// How many pristine instances the pool holds, and how many it should.
    ready: Arc<AtomicUsize>,
    depth: usize,
    /// How the component was obtained on load.
    provenance: Provenance,
}

/// What it takes to make an instance; shared with the fill thread.
struct Prepared {
    runtime: Runtime,
    /// The engine whose pool the instances come from (see
    /// [`super::RuntimeConfig::resident_pool_from`]).
    engine: Engine,
    pre: Pre,
    info: PluginInfo,
    name: Arc<str>,
    reads: Arc<[KindRef]>,
    limits: Limits,
    digest: String,
    contract: String,
    /// Kept to make the same plugin under other limits without compiling again.
    component: wasmtime::component::Component,
}

/// An instance that has never been called.
struct Warm {
    store: Store<State>,
    bindings: Instance,
}

/// A successful call.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The validated desired state.
    pub desired: crate::model::Desired,
    /// What the call read through `get` and `list`.
    pub reads: Vec<Read>,
    /// The largest linear memory the instance reached, in bytes.
    pub memory_peak: usize,
    /// Time in the plugin, including validation.
    pub elapsed: Duration,
    /// The size of the response as the plugin wrote it, in bytes: the children's and status's
    /// JSON text plus the strings of its conditions, events and parent metadata (what the
    /// response-size limit holds it to; no serialisation of the desired state is involved).
    pub response_bytes: usize,
}

impl Plugin {
    /// Compiles (or loads from the cache), type-checks and describes a component.
    /// `origin` names it in errors (a path or a resource name).
    pub fn load(
        runtime: &Runtime,
        origin: &str,
        bytes: &[u8],
        limits: Limits,
    ) -> Result<Self, LoadError> {
        Self::load_with_warm(runtime, origin, bytes, limits, WARM_INSTANCES)
    }

    /// Like [`Plugin::load`], keeping `warm` pristine instances ready instead of the default
    /// two. With zero, every call instantiates inline (what benchmarks compare against).
    pub fn load_with_warm(
        runtime: &Runtime,
        origin: &str,
        bytes: &[u8],
        limits: Limits,
        warm: usize,
    ) -> Result<Self, LoadError> {
        let digest = sha256_hex(bytes);
        let (compiler, budget) = &*runtime.compiler;
        let (component, provenance) = runtime.cache.load_or_compile(
            &runtime.engine,
            (compiler, budget),
            origin,
            &digest,
            bytes,
        )?;
        Self::from_component(runtime, origin, digest, component, provenance, limits, warm)
    }

    /// The plugin whose component has sha256 `digest` (lower-case hex), from the compiled-code
    /// cache alone: `None` if the cache has no usable entry. The digest was verified when the
    /// entry was written, so a restarted host needs neither the source nor the bytes again.
    pub fn load_cached(
        runtime: &Runtime,
        origin: &str,
        digest: &str,
        limits: Limits,
    ) -> Option<Result<Self, LoadError>> {
        let component = runtime.cache.load(&runtime.engine, digest)?;
        Some(Self::from_component(
            runtime,
            origin,
            digest.to_owned(),
            component,
            Provenance::Cached,
            limits,
            WARM_INSTANCES,
        ))
    }

    fn from_component(
        runtime: &Runtime,
        origin: &str,
        digest: String,
        component: wasmtime::component::Component,
        provenance: Provenance,
        limits: Limits,
        warm: usize,
    ) -> Result<Self, LoadError> {
        let (version, contract) = check_contract(origin, &component)?;
        let not_reconciler = |e: wasmtime::Error| LoadError::NotAReconciler {
            origin: origin.to_owned(),
            message: format!("{e:#}"),
        };
        // A component already moved to the resident pool (`with_limits`) stays there.
        let engine = component.engine().clone();
        let linker = match &runtime.resident {
            Some((lane, _)) if Engine::same(&engine, &lane.engine) => &lane.linker,
            _ => &runtime.linker,
        };
        let pre = linker.instantiate_pre(&component).map_err(not_reconciler)?;
        let pre = Pre::new(version, pre).map_err(not_reconciler)?;
        let mut prepared = Prepared {
            runtime: runtime.clone(),
            engine,
            pre,
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                parent: KindRef::new("", ""),
                children: vec![],
                reads: vec![],
                finalizer: false,
                strategies: Default::default(),
                ignore_status_changes: false,
            },
            name: Arc::from(origin),
            reads: Arc::from(Vec::new()),
            limits,
            digest,
            contract,
            component,
        };
        let (info, memory) = prepared.call_info().map_err(|e| LoadError::Info {
            origin: origin.to_owned(),
            source: Box::new(e),
        })?;
        check_info(&info).map_err(|(field, reason)| LoadError::InvalidInfo {
            origin: origin.to_owned(),
            field,
            reason,
        })?;
        prepared.name = Arc::from(info.name.as_str());
        prepared.reads = Arc::from(info.reads.clone());
        prepared.info = info;
        if let Some((lane, from)) = &runtime.resident
            && memory >= *from
            && !Engine::same(&prepared.engine, &lane.engine)
        {
            prepared.move_to(lane, version);
        }
        let prepared = Arc::new(prepared);
        let (tx, rx) = sync_channel(warm);
        let ready = Arc::new(AtomicUsize::new(0));
        if warm > 0 {
            spawn_fill(prepared.clone(), warm, tx.clone(), ready.clone());
        }
        Ok(Self {
            inner: Arc::new(Inner {
                prepared,
                warm: Mutex::new(rx),
                refill: tx,
                ready,
                depth: warm,
                provenance,
            }),
        })
    }

    /// What the plugin declared.
    pub fn info(&self) -> &PluginInfo {
        &self.inner.prepared.info
    }

    /// The component's sha256.
    pub fn digest(&self) -> &str {
        &self.inner.prepared.digest
    }

    /// The contract the component was built against, e.g. `reconhost:plugin@0.1.0`.
    pub fn contract(&self) -> &str {
        &self.inner.prepared.contract
    }

    /// The same component under other limits: compiled code and type-checking are reused;
    /// only the instances (which carry the limits) are new.
    pub fn with_limits(&self, limits: Limits) -> Result<Self, LoadError> {
        let p = &self.inner.prepared;
        Self::from_component(
            &p.runtime,
            &p.name,
            p.digest.clone(),
            p.component.clone(),
            self.inner.provenance,
            limits,
            WARM_INSTANCES,
        )
    }

    /// Whether its instances come from the pool that keeps whole memories resident (see
    /// [`super::RuntimeConfig::resident_pool_from`]).
    pub fn keeps_memory_resident(&self) -> bool {
        let p = &self.inner.prepared;
        p.runtime
            .resident
            .as_ref()
            .is_some_and(|(lane, _)| Engine::same(&p.engine, &lane.engine))
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.inner.prepared.limits
    }

    /// Whether the compiled code came from the cache.
    pub fn provenance(&self) -> Provenance {
        self.inner.provenance
    }

    /// Runs one reconcile in a pristine instance. Blocks the calling thread for at most the
    /// deadline (plus one tick); call it from a blocking-friendly thread.
    pub fn reconcile(
        &self,
        request: &ReconcileRequest,
        reader: Arc<dyn ObjectReader>,
    ) -> Result<Outcome, CallError> {
        self.reconcile_then(request, reader, |result| result)
    }

    /// Like [`Plugin::reconcile`], but hands the result to `deliver` as soon as it exists; only
    /// then is the used instance torn down and, if the pool is short, its replacement made, on
    /// this thread. Neither is on the latency of whoever `deliver` tells.
    pub fn reconcile_then<T>(
        &self,
        request: &ReconcileRequest,
        reader: Arc<dyn ObjectReader>,
        deliver: impl FnOnce(Result<Outcome, CallError>) -> T,
    ) -> T {
        let mut used = None;
        let result = self.call(request, reader, &mut used);
        let delivered = deliver(result);
        drop(used);
        self.top_up();
        delivered
    }

    /// Makes one pristine instance if the pool holds fewer than it should.
    fn top_up(&self) {
        let inner = &self.inner;
        if inner.ready.load(Ordering::Relaxed) >= inner.depth {
            return;
        }
        match inner.prepared.instantiate() {
            Ok(warm) => {
                // Counted before it is sent, so a caller that takes it never counts below zero.
                inner.ready.fetch_add(1, Ordering::Relaxed);
                // Full (another caller topped it up first): this one is dropped unused.
                if inner.refill.try_send(warm).is_err() {
                    inner.ready.fetch_sub(1, Ordering::Relaxed);
                }
            }
            // The next call instantiates inline and reports the error on its parent.
            Err(e) => {
                tracing::warn!(plugin = %inner.prepared.info.name, error = %e, "pre-instantiating failed");
            }
        }
    }

    /// The call itself; the instance it used is left in `used`, for the caller to drop when it
    /// suits.
    fn call(
        &self,
        request: &ReconcileRequest,
        reader: Arc<dyn ObjectReader>,
        used: &mut Option<Store<State>>,
    ) -> Result<Outcome, CallError> {
        let prepared = &self.inner.prepared;
        let parent = object_ref(&request.parent);
        let fail = |kind| CallError {
            plugin: prepared.info.name.clone(),
            parent: parent.clone(),
            kind,
            reads: Vec::new(),
        };
        let start = Instant::now();
        let warm = self
            .inner
            .warm
            .lock()
            .ok()
            .and_then(|rx| rx.try_recv().ok());
        if warm.is_some() {
            self.inner.ready.fetch_sub(1, Ordering::Relaxed);
        }
        let Warm { store, bindings } = match warm {
            Some(w) => w,
            None => prepared.instantiate().map_err(fail)?,
        };
        let store = used.insert(store);
        store.data_mut().reader = reader;
        store.data_mut().parent = parent.clone();
        let running = prepared.runtime.ticker.running();
        store.set_epoch_deadline(deadline_ticks(prepared.limits.deadline));
        let result = bindings.reconcile(&mut *store, request);
        drop(running);
        forward_output(store, &prepared.name, &parent);
        let response = match result {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                // The message reaches events, conditions and logs.
                let error = match error {
                    PluginError::Transient(m) => {
                        PluginError::Transient(printable(&m, MAX_CONDITION_MESSAGE))
                    }
                    PluginError::Permanent(m) => {
                        PluginError::Permanent(printable(&m, MAX_CONDITION_MESSAGE))
                    }
                };
                return Err(CallError {
                    reads: std::mem::take(&mut store.data_mut().reads),
                    ..fail(error.into())
                });
            }
            Err(e) => return Err(fail(classify(&e, store, &prepared.limits))),
        };
        let response_bytes = response_size(&response);
        let desired =
            validate(&prepared.info, &request.parent, response, &prepared.limits).map_err(fail)?;
        let state = store.data_mut();
        Ok(Outcome {
            desired,
            response_bytes,
            reads: std::mem::take(&mut state.reads),
            memory_peak: state.memory.peak,
            elapsed: start.elapsed(),
        })
    }
}

impl Prepared {
    fn instantiate(&self) -> Result<Warm, CallErrorKind> {
        let state = State::new(self.name.clone(), self.reads.clone(), &self.limits);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.memory);
        // Instantiation runs guest start-up code, which is as untrusted as the rest.
        let _running = self.runtime.ticker.running();
        store.set_epoch_deadline(deadline_ticks(self.limits.deadline));
        store.epoch_deadline_trap();
        match self.pre.instantiate(&mut store) {
            Ok(bindings) => Ok(Warm { store, bindings }),
            Err(e) => Err(classify(&e, &store, &self.limits)),
        }
    }

    /// The plugin's info, and how large its linear memory is when an instance starts.
    fn call_info(&self) -> Result<(PluginInfo, usize), CallError> {
        let fail = |kind| CallError {
            plugin: self.name.to_string(),
            parent: String::new(),
            kind,
            reads: Vec::new(),
        };
        let Warm {
            mut store,
            bindings,
        } = self.instantiate().map_err(fail)?;
        let memory = store.data().memory.peak;
        let running = self.runtime.ticker.running();
        let result = bindings.info(&mut store);
        drop(running);
        forward_output(&store, &self.name, "");
        result
            .map(|info| (info, memory))
            .map_err(|e| fail(classify(&e, &store, &self.limits)))
    }

    /// Makes instances from `lane`'s pool from now on, with the compiled code the cache holds;
    /// where that fails the plugin stays where it is, slower but correct.
    fn move_to(&mut self, lane: &super::engine::Lane, version: Contract) {
        let Some(component) = self.runtime.cache.load(&lane.engine, &self.digest) else {
            tracing::warn!(plugin = %self.info.name, "no cached code to move to the resident pool");
            return;
        };
        match lane
            .linker
            .instantiate_pre(&component)
            .and_then(|pre| Pre::new(version, pre))
        {
            Ok(pre) => {
                self.pre = pre;
                self.engine = lane.engine.clone();
                self.component = component;
            }
            Err(e) => {
                tracing::warn!(plugin = %self.info.name, error = %e, "not moved to the resident pool");
            }
        }
    }
}

/// Fills a new plugin's pool once, off the loading thread; calls keep it full afterwards
/// ([`Plugin::reconcile_then`]).
fn spawn_fill(
    prepared: Arc<Prepared>,
    depth: usize,
    tx: SyncSender<Warm>,
    ready: Arc<AtomicUsize>,
) {
    let name = format!("reconhost-warm-{}", prepared.info.name);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        for _ in 0..depth {
            match prepared.instantiate() {
                Ok(warm) => {
                    // Counted before it is sent, as in `top_up`.
                    ready.fetch_add(1, Ordering::Relaxed);
                    // Full (calls topped it up already) or the plugin is gone: done either way.
                    if tx.try_send(warm).is_err() {
                        ready.fetch_sub(1, Ordering::Relaxed);
                        return;
                    }
                }
                Err(e) => {
                    // The call path instantiates inline and reports the error on the parent.
                    tracing::warn!(plugin = %prepared.info.name, error = %e, "pre-instantiating failed");
                    return;
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no fill thread; calls fill the pool as they go");
    }
}

fn deadline_ticks(deadline: Duration) -> u64 {
    // One extra tick: the ticker may fire right after the deadline is set.
    deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64 + 1
}

/// Turns a wasmtime error from a call into the reason an operator can act on.
fn classify(e: &wasmtime::Error, store: &Store<State>, limits: &Limits) -> CallErrorKind {
    let state = store.data();
    let pipe_full = |p: &wasmtime_wasi::p2::pipe::MemoryOutputPipe| {
        // A write that would overflow is refused whole, so "full" means less room left than a
        // typical line, not exactly at capacity; the slack scales down for small budgets.
        p.contents().len() + (limits.log_bytes / 16).min(1024) >= limits.log_bytes
    };
    let chain = format!("{e:#}");
    // A full stdout or stderr pipe surfaces in the guest as a failed write (Rust's println!
    // then panics), so the pipe's fill level, not the trap, tells that output was the cause.
    if state.log_exceeded || pipe_full(&state.stdout) || pipe_full(&state.stderr) {
        return CallErrorKind::LogLimit {
            limit: limits.log_bytes,
        };
    }
    if let Some(what) = &state.read_exceeded {
        return CallErrorKind::ReadLimit { what: what.clone() };
    }
    let trap = e.downcast_ref::<Trap>();
    if trap == Some(&Trap::Interrupt) {
        return CallErrorKind::Deadline(limits.deadline);
    }
    if state.memory.denied {
        return CallErrorKind::MemoryLimit {
            limit: limits.memory,
        };
    }
    let what = match trap {
        Some(Trap::StackOverflow) => "stack overflow (the wasm call stack is exhausted)".to_owned(),
        Some(t) => t.to_string(),
        None => chain.lines().next().unwrap_or("").to_owned(),
    };
    let stderr = String::from_utf8_lossy(&state.stderr.contents()).into_owned();
    let said = Said::parse(&stderr);
    let what = what.strip_prefix("wasm trap: ").unwrap_or(&what);
    let trap: Box<str> = if said.context.is_empty() {
        what.into()
    } else {
        format!(
            "{what}; plugin stderr: {}",
            printable(&said.context, MAX_CONDITION_MESSAGE)
        )
        .into()
    };
    CallErrorKind::Trap {
        message: printable(&said.message, MAX_CONDITION_MESSAGE),
        trap,
    }
}

/// What a trapped plugin said on stderr, split into its own message and the rest.
#[derive(Debug, Default, PartialEq, Eq)]
struct Said {
    /// The plugin's own words: the message of a Rust panic, the last line of a Python
    /// traceback, the error of a JavaScript `Uncaught` line, else the last line printed.
    message: String,
    /// The last lines besides it (frames, the panic's location), joined by ` | `.
    context: String,
}

impl Said {
    /// Splits stderr. Language runtimes print their own notices around the plugin's message
    /// (Rust: the panic location before it and a hint to set `RUST_BACKTRACE`, which means
    /// nothing in the sandbox, after it; componentize-js: the stack, its failure to turn the
    /// exception into a WIT error, and "Redirecting call to abort()"); the hints are dropped and
    /// the message is picked out of the rest.
    fn parse(stderr: &str) -> Self {
        let lines: Vec<&str> = stderr
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty() && !is_runtime_notice(l))
            .collect();
        let panic = lines.iter().position(|l| l.contains(" panicked at "));
        let mut taken = Vec::new();
        let message = if let Some(at) = panic {
            // A Rust panic: its message is the lines after the location line.
            taken.extend(at + 1..lines.len());
            lines[at + 1..].join(" ")
        } else if let Some(at) = lines.iter().rposition(|l| l.starts_with("Uncaught ")) {
            taken.push(at);
            lines[at].trim_start_matches("Uncaught ").to_owned()
        } else if let Some(at) = lines
            .iter()
            .rposition(|l| !l.starts_with(char::is_whitespace))
        {
            // Python's traceback ends with the exception; other runtimes print their message
            // last too.
            taken.push(at);
            lines[at].to_owned()
        } else {
            String::new()
        };
        let rest: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !taken.contains(i))
            .map(|(_, l)| l.trim())
            .collect();
        let context = rest[rest.len().saturating_sub(STDERR_TAIL_LINES)..].join(" | ");
        Self {
            message: message.trim().to_owned(),
            context,
        }
    }
}

/// Lines a language runtime adds that tell a plugin's operator nothing.
fn is_runtime_notice(line: &str) -> bool {
    let line = line.trim();
    line.contains("RUST_BACKTRACE")
        || line.starts_with("Redirecting call to abort()")
        || line == "Stack:"
        // componentize-js failing to read a thrown Error as the WIT `error` variant: the
        // exception itself is on its `Uncaught` line.
        || line.starts_with("invalid variant tag value")
}

/// How many of the last lines of a trapped plugin's stderr its error carries.
const STDERR_TAIL_LINES: usize = 8;

/// Sends what the plugin printed to the host's log, one event per line.
fn forward_output(store: &Store<State>, plugin: &str, parent: &str) {
    let state = store.data();
    let lines = |bytes: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(bytes)
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| printable(l, MAX_LOG_LINE))
            .collect()
    };
    for line in lines(&state.stdout.contents()) {
        tracing::info!(plugin, parent, stream = "stdout", "{line}");
    }
    for line in lines(&state.stderr.contents()) {
        tracing::warn!(plugin, parent, stream = "stderr", "{line}");
    }
}

/// Rejects a component built against a contract version the host does not implement, before
/// linking would fail with a less helpful message. Returns the version to call it by and the
/// contract it names.
fn check_contract(
    origin: &str,
    component: &wasmtime::component::Component,
) -> Result<(Contract, String), LoadError> {
    Contract::of(&contract::names(component.engine(), component)).map_err(|found| {
        LoadError::UnsupportedContract {
            origin: origin.to_owned(),
            found: found.0,
            supported: SUPPORTED_CONTRACTS,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_should_take_a_python_exception_from_its_traceback() {
        let said = Said::parse(
            "Traceback (most recent call last):\n  File \"/0/app.py\", line 37, in reconcile\n    x = spec[\"k\"]\nKeyError: 'missing'\n",
        );
        assert_eq!(said.message, "KeyError: 'missing'");
        assert_eq!(
            said.context,
            "Traceback (most recent call last): | File \"/0/app.py\", line 37, in reconcile | x = spec[\"k\"]"
        );
    }

    #[test]
    fn said_should_take_a_rust_panic_message_and_drop_the_backtrace_hint() {
        let said = Said::parse(
            "thread '<unnamed>' (1) panicked at src/lib.rs:23:9:\ngave up on w\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
        );
        assert_eq!(said.message, "gave up on w");
        assert_eq!(
            said.context,
            "thread '<unnamed>' (1) panicked at src/lib.rs:23:9:"
        );
    }

    #[test]
    fn said_should_take_a_javascript_uncaught_error_and_drop_the_runtime_notices() {
        let said = Said::parse(
            "reconcile@plugin.js:376:30\nUncaught Error: gave up on w\ninvalid variant tag value `undefined` (received `Error: gave up on w`) specified for `Error`\nStack:\n  export_reconcile@initializer.js:971:17\nRedirecting call to abort() to mozalloc_abort\n",
        );
        assert_eq!(said.message, "Error: gave up on w");
        assert_eq!(
            said.context,
            "reconcile@plugin.js:376:30 | export_reconcile@initializer.js:971:17"
        );
    }

    #[test]
    fn trap_should_lead_with_the_plugins_message_and_keep_the_trap_after_it() {
        let err = CallErrorKind::Trap {
            message: "KeyError: 'missing'".into(),
            trap: "wasm `unreachable` instruction executed".into(),
        };
        assert_eq!(
            err.to_string(),
            "KeyError: 'missing' (trapped: wasm `unreachable` instruction executed)"
        );
        let silent = CallErrorKind::Trap {
            message: String::new(),
            trap: "stack overflow".into(),
        };
        assert_eq!(silent.to_string(), "trapped: stack overflow");
    }
}
