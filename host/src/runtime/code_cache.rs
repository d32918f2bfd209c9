//! On-disk cache of compiled plugins, keyed by the component's sha256 and the engine's
//! compatibility hash (wasmtime version, target and every setting that affects code), so a
//! second load maps the compiled code from disk instead of compiling.
//!
//! Only files this host wrote are ever loaded: the key is derived from bytes the host read and
//! hashed itself, and entries are written to a temporary name and renamed into place, so a crash
//! never leaves a truncated entry under a valid name. Loading compiled code is `unsafe` in
//! wasmtime precisely because a forged file could run arbitrary native code; never point the
//! cache at a directory others can write to.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::compile::{CompileBudget, Compiler, compile};
use super::error::LoadError;

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct CompiledCache {
    dir: PathBuf,
    engine_key: String,
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Compiled now (and stored in the cache).
    Compiled,
    /// Loaded from the cache.
    Cached,
}

impl Provenance {
    /// `compiled` or `cached`, for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Compiled => "compiled",
            Self::Cached => "cached",
        }
    }
}

impl CompiledCache {
    /// A cache in `dir` for components compiled by `engine`.
    pub fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    /// Where the entry for a digest lives.
    pub fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The compiled component for `digest` if the cache holds a usable one.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `store` below from code this host compiled, under a
        // name derived from the digest of bytes the host hashed itself and this engine's
        // settings.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring an unusable compiled-code cache entry");
                None
            }
        }
    }

    /// Whether the cache holds an entry for `digest`.
    pub fn contains(&self, digest: &str) -> bool {
        self.path(digest).is_file()
    }

    /// The compiled component for `bytes` (whose sha256 is `digest`): from the cache if present,
    /// else compiled and stored.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        (compiler, budget): (&Compiler, &CompileBudget),
        origin: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(Component, Provenance), LoadError> {
        if let Some(component) = self.load(engine, digest) {
            return Ok((component, Provenance::Cached));
        }
        let path = self.path(digest);
        let compile_err = |message: String| LoadError::Compile {
            origin: origin.to_owned(),
            digest: digest.to_owned(),
            message,
        };
        let serialized = compile(compiler, engine, origin, digest, bytes, budget)?;
        if let Err(error) = self.store(&path, &serialized) {
            // A read-only filesystem (no writable RECONHOST_CACHE under readOnlyRootFilesystem)
            // costs a compile on every start, not the plugin.
            warn_unwritable(&error);
        }
        // SAFETY: `serialized` was produced a moment ago by this engine or by a compile worker
        // (this binary, with the same settings); wasmtime checks it was made for this engine.
        let component = unsafe { Component::deserialize(engine, &serialized) }
            .map_err(|e| compile_err(format!("{e:#}")))?;
        Ok((component, Provenance::Compiled))
    }

    fn store(&self, path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
        let err = |message: String| LoadError::Cache {
            path: path.to_owned(),
            message,
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| err(format!("creating the directory: {e}")))?;
        // Unique per writer, not just per process: two threads loading the same plugin at once
        // must not write into one temporary file.
        static WRITERS: AtomicU64 = AtomicU64::new(0);
        let writer = WRITERS.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{writer}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| err(format!("writing: {e}")))?;
        std::fs::rename(&tmp, path).map_err(|e| err(format!("renaming into place: {e}")))
    }
}

/// Warns once per process that compiled code cannot be kept.
fn warn_unwritable(error: &LoadError) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(%error, "the compiled-code cache is not writable; plugins are compiled in memory and again on every start (set RECONHOST_CACHE to a writable directory)");
    });
}

/// sha256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}
