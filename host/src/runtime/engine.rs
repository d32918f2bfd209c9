//! The one wasmtime engine of the host: configuration, the epoch ticker, the linker with the
//! host imports and capability-free WASI, and the compiled-code cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::{v0_1, v0_2};
use super::code_cache::CompiledCache;
use super::compile::{CompileBudget, Compiler};
use super::state::State;

/// Interval of the epoch ticker: the granularity of call deadlines. Spin uses 10 ms as well;
/// shorter ticks cost a wake-up each, longer ones make deadlines coarse.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings of the runtime as a whole (per-plugin limits are in [`super::Limits`]).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory of the compiled-code cache.
    pub cache_dir: PathBuf,
    /// How many instances may exist at once across all plugins (in calls, warm or loading).
    /// Sizes the pooling allocator. Default 256.
    pub max_instances: u32,
    /// Upper bound of any plugin's memory cap, in bytes; reserves address space per pool slot.
    /// Default 1 GiB.
    pub max_memory: usize,
    /// How a used instance's memory is made pristine again for the next one.
    pub memory_reset: MemoryReset,
    /// Plugins whose linear memory starts at least this large (language runtimes that
    /// snapshot a big heap: CPython) get their instances from a second pool that keeps the
    /// whole memory resident and restores it by copying ([`RESIDENT_POOL_KEEP`] bytes of it).
    /// Their calls write pages all over that heap, more scattered runs of pages than the
    /// scan of [`MemoryReset::Scan`] follows (wasmtime stops at 32), so in the first pool
    /// each call took its writes as page faults again: ~280 for Python's webapp, half its
    /// reconcile (docs/BENCHMARKS.md). Costs resident memory: a used slot of this pool holds
    /// all of its memory. Default 12 MiB (Python's 13 MiB; TypeScript's 9.5 MiB measured
    /// better in the first pool); `None`: one pool for every plugin.
    pub resident_pool_from: Option<usize>,
    /// Where components are compiled. Default [`Compiler::InProcess`]; the `reconhost` binary
    /// uses [`Compiler::Worker`].
    pub compiler: Compiler,
    /// Bounds on compiling one component.
    pub compile_budget: CompileBudget,
}

/// How the pooling allocator returns a used instance's linear memory to its initial contents.
/// Every strategy gives the next call a pristine memory; they differ in what the reset costs
/// and in how many page faults the next call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryReset {
    /// [`MemoryReset::Scan`] with 2 MiB where the kernel has `PAGEMAP_SCAN` (Linux 6.7 and
    /// later), [`MemoryReset::Memset`] with 0 elsewhere: the fastest of each, as measured
    /// (docs/BENCHMARKS.md).
    Auto,
    /// Ask the kernel which pages the call wrote (`PAGEMAP_SCAN`) and restore only those, up to
    /// `keep_resident` bytes, which stay mapped so the next call takes no page faults on them;
    /// the rest is given back to the kernel.
    Scan {
        /// Bytes of each memory kept resident between calls.
        keep_resident: usize,
    },
    /// Restore the first `keep_resident` bytes with `memset` whether they were written or not,
    /// and give the rest back to the kernel (`madvise`), so the next call faults its pages in
    /// again.
    Memset {
        /// Bytes of each memory kept resident between calls.
        keep_resident: usize,
    },
}

impl MemoryReset {
    /// What [`MemoryReset::Auto`] comes to on this machine; the others as they are.
    pub fn resolve(self) -> Self {
        match self {
            Self::Auto if PoolingAllocationConfig::is_pagemap_scan_available() => Self::Scan {
                keep_resident: 2 << 20,
            },
            Self::Auto => Self::Memset { keep_resident: 0 },
            other => other,
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let cache = std::env::var_os("RECONHOST_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(std::env::temp_dir)
                    .join(".cache/reconhost")
            });
        Self {
            cache_dir: cache.join("compiled"),
            max_instances: 256,
            max_memory: 1 << 30,
            memory_reset: MemoryReset::Auto,
            resident_pool_from: Some(12 << 20),
            compiler: Compiler::InProcess,
            compile_budget: CompileBudget::default(),
        }
    }
}

/// Unused slots the resident pool keeps warm (each holds its memory resident).
const RESIDENT_WARM_SLOTS: u32 = 8;

/// How many bytes of each memory the resident pool restores by copying and keeps (see
/// [`RuntimeConfig::resident_pool_from`]); a memory grown beyond it has the rest given back to
/// the kernel, so a plugin that grew large does not copy all of it on every reset.
pub const RESIDENT_POOL_KEEP: usize = 32 << 20;

/// The engine, linker and cache shared by every plugin. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<State>>,
    /// The second pool, for plugins with a large memory, and from which size; see
    /// [`RuntimeConfig::resident_pool_from`].
    pub(super) resident: Option<(Lane, usize)>,
    pub(super) cache: CompiledCache,
    pub(super) ticker: Arc<Ticker>,
    pub(super) compiler: Arc<(Compiler, CompileBudget)>,
}

/// An engine (with its own instance pool) and the linker for it. Compiled code is the same in
/// every lane (pooling settings do not change it), so a component moves between lanes by
/// loading the cached code again.
#[derive(Clone)]
pub(super) struct Lane {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<State>>,
}

/// Failure to set up the engine itself.
#[derive(Debug, thiserror::Error)]
#[error("setting up the WebAssembly engine: {0}")]
pub struct EngineError(String);

impl Runtime {
    /// Whether `bytes` would be compiled rather than loaded from the compiled-code cache. A
    /// command-line tool says so before a large component (a Python one, ~18 MB) keeps it
    /// silent for seconds.
    pub fn needs_compile(&self, bytes: &[u8]) -> bool {
        !self.cache.contains(&super::code_cache::sha256_hex(bytes))
    }

    /// Builds the engine (pooling allocator, falling back to on-demand allocation where the
    /// address space cannot be reserved) and the second one whose pool keeps large memories
    /// resident ([`RuntimeConfig::resident_pool_from`]), starts the epoch ticker for both and
    /// links the host imports into each.
    pub fn new(config: RuntimeConfig) -> Result<Self, EngineError> {
        let reset = config.memory_reset.resolve();
        let (engine, pooling) = match Engine::new(&engine_config(&config, Some(reset), false)) {
            Ok(engine) => (engine, true),
            Err(e) => {
                tracing::warn!(error = %e, "pooling allocator unavailable; allocating instances on demand");
                let engine = Engine::new(&engine_config(&config, None, false))
                    .map_err(|e| EngineError(format!("{e:#}")))?;
                (engine, false)
            }
        };
        // Without pooling there is no reset to choose, and where the address space for a
        // second pool cannot be reserved, every plugin stays in the first.
        let resident = match config.resident_pool_from {
            Some(from) if pooling => {
                let keep = MemoryReset::Memset {
                    keep_resident: RESIDENT_POOL_KEEP,
                };
                match Engine::new(&engine_config(&config, Some(keep), true)) {
                    Ok(engine) => Some((lane(engine)?, from)),
                    Err(e) => {
                        tracing::warn!(error = %e, "no second instance pool for plugins with a large memory");
                        None
                    }
                }
            }
            _ => None,
        };
        let mut engines = vec![engine.clone()];
        engines.extend(resident.iter().map(|(lane, _)| lane.engine.clone()));
        let ticker = Ticker::spawn(&engines);
        let Lane { engine, linker } = lane(engine)?;
        let cache = CompiledCache::new(config.cache_dir.clone(), &engine);
        Ok(Self {
            engine,
            linker,
            resident,
            cache,
            ticker,
            compiler: Arc::new((config.compiler, config.compile_budget)),
        })
    }

    /// The compiled-code cache.
    pub fn cache(&self) -> &CompiledCache {
        &self.cache
    }

    /// The bounds on compiling one component.
    pub fn compile_budget(&self) -> &CompileBudget {
        &self.compiler.1
    }
}

/// The engine with the host's imports linked: capability-free WASI and each contract version's
/// imports, side by side (a component links against the one it names).
fn lane(engine: Engine) -> Result<Lane, EngineError> {
    let mut linker = Linker::<State>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .map_err(|e| EngineError(format!("linking WASI: {e:#}")))?;
    v0_1::Reconciler::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)
        .and_then(|()| v0_2::Reconciler::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s))
        .map_err(|e| EngineError(format!("linking the host imports: {e:#}")))?;
    Ok(Lane {
        engine,
        linker: Arc::new(linker),
    })
}

/// The engine of a compile worker: the host's settings without the pooling allocator (which
/// compiled code does not depend on), so what it compiles loads in the host.
pub(super) fn worker_engine() -> Result<Engine, EngineError> {
    Engine::new(&engine_config(&RuntimeConfig::default(), None, false))
        .map_err(|e| EngineError(format!("{e:#}")))
}

/// The engine's settings; with `reset`, a pooling allocator that resets memories so.
/// A pool's unused instance slots stay warm up to `n / 4` of them; the resident pool's at most
/// [`RESIDENT_WARM_SLOTS`].
fn engine_config(config: &RuntimeConfig, reset: Option<MemoryReset>, resident: bool) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .parallel_compilation(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        // 512 KiB of wasm stack (the default), stated so it is not forgotten: deep recursion in
        // a plugin is a trap, not a crash of the host thread.
        .max_wasm_stack(512 << 10);
    if let Some(reset) = reset {
        let n = config.max_instances;
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(n)
            // A Rust component built for wasip2 has a handful of core instances (the program, the
            // WASI adapter, shims); language runtimes have more.
            .total_core_instances(n * 8)
            .total_memories(n * 2)
            .total_tables(n * 4)
            .total_stacks(n)
            .max_memory_size(config.max_memory)
            .max_component_instance_size(10 << 20)
            .max_core_instance_size(10 << 20)
            .max_memories_per_component(4)
            .max_tables_per_component(8)
            // A warm slot of the resident pool holds its whole memory (13 MiB for a Python
            // plugin): a few are enough to keep the instances a plugin has ready.
            .max_unused_warm_slots(if resident {
                RESIDENT_WARM_SLOTS.min(n / 4)
            } else {
                n / 4
            });
        let (scan, keep_resident) = match reset.resolve() {
            MemoryReset::Scan { keep_resident } => (true, keep_resident),
            MemoryReset::Memset { keep_resident } => (false, keep_resident),
            // `resolve` never answers Auto.
            MemoryReset::Auto => (false, 0),
        };
        pool.pagemap_scan(if scan { Enabled::Yes } else { Enabled::No })
            .linear_memory_keep_resident(keep_resident)
            .table_keep_resident(keep_resident.min(64 << 10));
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

/// The engine's epoch ticker: one thread that bumps the epoch every [`EPOCH_TICK`] while guest
/// code may run (a [`Running`] guard is held) and goes to sleep after [`IDLE_TICKS`] ticks
/// without any, so an idle host is not woken a hundred times a second. A busy host keeps it
/// ticking, and a call pays a wake-up only when the ticker was asleep: waking it on every
/// call cost ~16 µs of CPU per call (futex and a thread switch), measured with `make bench`.
/// It exits when the engine is gone.
pub(super) struct Ticker {
    /// Guards held: instantiations and calls in progress.
    busy: AtomicUsize,
    /// The thread is parked (or about to be) and must be unparked by the next guard.
    asleep: AtomicBool,
    /// Epochs advanced so far (for tests and diagnostics).
    ticks: AtomicU64,
    thread: Thread,
}

/// Ticks without a guard before the ticker sleeps: one second.
const IDLE_TICKS: u32 = 100;

impl Ticker {
    /// Ticks every engine in `engines`; exits once the first is gone.
    fn spawn(engines: &[Engine]) -> Arc<Self> {
        let weak: Vec<_> = engines.iter().map(Engine::weak).collect();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<Ticker>>(1);
        let handle = std::thread::Builder::new()
            .name("reconhost-epoch".into())
            .spawn(move || {
                let Ok(ticker) = rx.recv() else { return };
                let mut idle = 0;
                loop {
                    if ticker.asleep.load(Ordering::SeqCst) {
                        // An unpark before this park is not lost; the timeout only checks now
                        // and then whether the engine is gone.
                        std::thread::park_timeout(Duration::from_secs(1));
                        if weak[0].upgrade().is_none() {
                            return;
                        }
                        continue;
                    }
                    // A whole tick after waking, not at once: a call is never cut short by a
                    // tick that came right after it started.
                    std::thread::sleep(EPOCH_TICK);
                    if weak[0].upgrade().is_none() {
                        return;
                    }
                    for engine in weak.iter().filter_map(|w| w.upgrade()) {
                        engine.increment_epoch();
                    }
                    ticker.ticks.fetch_add(1, Ordering::Relaxed);
                    idle = if ticker.busy.load(Ordering::SeqCst) == 0 {
                        idle + 1
                    } else {
                        0
                    };
                    if idle >= IDLE_TICKS {
                        idle = 0;
                        ticker.asleep.store(true, Ordering::SeqCst);
                        // A guard taken between the count above and the flag saw the flag
                        // down and did not unpark: look again now that the flag is up.
                        if ticker.busy.load(Ordering::SeqCst) > 0 {
                            ticker.asleep.store(false, Ordering::SeqCst);
                        }
                    }
                }
            })
            .expect("spawning the epoch ticker thread");
        let ticker = Arc::new(Ticker {
            busy: AtomicUsize::new(0),
            asleep: AtomicBool::new(true),
            ticks: AtomicU64::new(0),
            thread: handle.thread().clone(),
        });
        tx.send(ticker.clone())
            .expect("the epoch ticker thread waits for its state");
        ticker
    }

    /// Keeps the epoch advancing until the guard is dropped: hold it while guest code with an
    /// epoch deadline may run.
    pub(super) fn running(&self) -> Running<'_> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) && self.asleep.swap(false, Ordering::SeqCst) {
            self.thread.unpark();
        }
        Running(self)
    }

    /// Epochs advanced since the runtime was made.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

/// Guest code may be running; see [`Ticker::running`].
pub(super) struct Running<'a>(&'a Ticker);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_code_should_be_compatible_with_the_hosts_engine() {
        use std::hash::{DefaultHasher, Hash as _, Hasher as _};
        let key = |engine: &Engine| {
            let mut hasher = DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            hasher.finish()
        };
        let config = RuntimeConfig::default();
        let host = Engine::new(&engine_config(&config, Some(config.memory_reset), false)).unwrap();
        let resident = MemoryReset::Memset {
            keep_resident: RESIDENT_POOL_KEEP,
        };
        let resident = Engine::new(&engine_config(&config, Some(resident), true)).unwrap();
        assert_eq!(key(&resident), key(&host));
        assert_eq!(key(&worker_engine().unwrap()), key(&host));
    }

    #[test]
    fn the_epoch_advances_only_while_guest_code_may_run() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: dir.path().to_owned(),
            ..RuntimeConfig::default()
        })
        .unwrap();
        std::thread::sleep(EPOCH_TICK * 5);
        assert_eq!(runtime.ticker.ticks(), 0, "an idle runtime ticked");

        let guard = runtime.ticker.running();
        let start = std::time::Instant::now();
        while runtime.ticker.ticks() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no tick while running"
            );
            std::thread::sleep(EPOCH_TICK);
        }
        drop(guard);
        // It ticks on for a second without guards, then must stand still.
        let start = std::time::Instant::now();
        loop {
            let before = runtime.ticker.ticks();
            std::thread::sleep(EPOCH_TICK * 5);
            if runtime.ticker.ticks() == before {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the epoch kept advancing after the guard was dropped"
            );
        }
    }
}
