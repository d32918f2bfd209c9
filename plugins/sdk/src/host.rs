//! What the host offers during a call: logging and reads from its cache.
//!
//! Reads are limited to the kinds declared in [`crate::Info::reads`], and the host remembers
//! them: when an object you read changes, the parent is reconciled again. You never write
//! watch-mapping code.
//!
//! What they return is each object's JSON text as an [`Object`], read on demand: with
//! [`Object::parse`] into a type of yours, or dynamically (`object["data"]`).

use crate::wit::reconhost::plugin::host as wit_host;
use crate::wit::reconhost::plugin::types as wit;
use crate::{Kind, Object};

pub use wit::Level;

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The kind is not declared in `reads`.
    NotAllowed(String),
    /// The request was malformed (e.g. a bad label selector).
    Invalid(String),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAllowed(m) => write!(f, "read not allowed: {m}"),
            Self::Invalid(m) => write!(f, "invalid read: {m}"),
            Self::Other(m) => write!(f, "read failed: {m}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<wit::ReadError> for ReadError {
    fn from(e: wit::ReadError) -> Self {
        match e {
            wit::ReadError::NotAllowed(m) => Self::NotAllowed(m),
            wit::ReadError::Invalid(m) => Self::Invalid(m),
            wit::ReadError::Other(m) => Self::Other(m),
        }
    }
}

/// Writes a line to the host's log, tagged with the plugin and the parent.
pub fn log(level: Level, message: &str) {
    wit_host::log(level, message);
}

/// Logs at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// One object by kind, namespace and name; `Ok(None)` if it does not exist.
pub fn get(kind: &Kind, namespace: &str, name: &str) -> Result<Option<Object>, ReadError> {
    Ok(wit_host::get(&kind.to_wit(), namespace, name)?.map(Object::from_json))
}

/// Objects of a kind in a namespace (empty: all namespaces) matching a label selector
/// (empty: all).
pub fn list(kind: &Kind, namespace: &str, label_selector: &str) -> Result<Vec<Object>, ReadError> {
    Ok(wit_host::list(&kind.to_wit(), namespace, label_selector)?
        .into_iter()
        .map(Object::from_json)
        .collect())
}
