//! A plugin from a file (`reconhost run --plugin`, and `--watch` reloading it): read once, so
//! the digest the host says it runs is the digest of the bytes it compiled, even when the file
//! is being replaced while it is read.

use std::path::{Path, PathBuf};

use tracing::info;

use crate::runtime::{Limits, LoadError, Plugin, Runtime, sha256_hex};

/// A plugin file could not be read or loaded.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("reading plugin {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a plugin this host runs.
    #[error("loading plugin {path}: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why it does not load.
        #[source]
        source: LoadError,
    },
    /// The blocking thread that loaded it failed.
    #[error("loading plugin {path}: the loading thread failed")]
    Thread {
        /// The file.
        path: PathBuf,
    },
}

/// Reads `path`; its bytes and their digest (`sha256:` hex).
pub fn read(path: &Path) -> Result<(Vec<u8>, String), FileError> {
    let bytes = std::fs::read(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let digest = sha256_hex(&bytes);
    Ok((bytes, digest))
}

/// Reads and loads a plugin file on a blocking thread.
pub async fn load(runtime: &Runtime, path: &Path, limits: Limits) -> Result<Plugin, FileError> {
    let (bytes, _) = read(path)?;
    load_bytes(runtime, path, bytes, limits).await
}

/// Loads bytes read from `path` on a blocking thread: compiling may take seconds.
pub async fn load_bytes(
    runtime: &Runtime,
    path: &Path,
    bytes: Vec<u8>,
    limits: Limits,
) -> Result<Plugin, FileError> {
    let (runtime, path): (Runtime, PathBuf) = (runtime.clone(), path.to_owned());
    let thread_path = path.clone();
    tokio::task::spawn_blocking(move || {
        let plugin = Plugin::load(&runtime, &path.display().to_string(), &bytes, limits).map_err(
            |source| FileError::Load {
                path: path.clone(),
                source,
            },
        )?;
        let info = plugin.info();
        info!(plugin = %info.name, version = %info.version, parent = %info.parent,
              provenance = ?plugin.provenance(), "plugin loaded");
        Ok(plugin)
    })
    .await
    .map_err(|_| FileError::Thread { path: thread_path })?
}
