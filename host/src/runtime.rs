//! The sandboxed plugin runtime: one wasmtime engine for the host, plugins compiled once (with
//! an on-disk cache), and every call in a fresh instance under a deadline and memory, output and
//! log caps. Nothing here knows about Kubernetes beyond JSON objects.
//!
//! Start with [`Runtime::new`], then [`Plugin::load`] and [`Plugin::reconcile`].

mod bindings;
mod code_cache;
mod compile;
mod contract;
mod engine;
mod error;
mod limits;
mod plugin;
mod reads;
mod state;
mod validate;

pub use code_cache::{CompiledCache, Provenance, sha256_hex};
pub use compile::{CompileBudget, Compiler, Shape, check_shape, worker_main};
pub use engine::{EPOCH_TICK, EngineError, MemoryReset, Runtime, RuntimeConfig};
pub use error::{CallError, CallErrorKind, LoadError};
pub use limits::Limits;
pub use plugin::{Outcome, Plugin, SUPPORTED_CONTRACTS};
pub use reads::{NoObjects, ObjectReader, Read, Refused, StaticObjects};
