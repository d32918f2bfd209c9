//! Reads a plugin makes through `host.get` and `host.list`: where they are answered from, and
//! the record of what was read, which the control loop turns into dependency tracking.

use serde_json::Value;

use crate::model::KindRef;
use crate::selector::Selector;

/// Answers a plugin's reads. The live host answers from its informer caches; `render` answers
/// from files. Implementations must not block on the network: a read is part of a call that
/// runs under a deadline.
///
/// Objects are answered as JSON text, the form they cross the boundary in, so a reader that
/// keeps text (the host's caches do) hands it over without a parse and a re-serialization.
///
/// A reader may refuse a read ([`Refused`]): the live host refuses what the plugin's
/// ServiceAccount may not read through the API server.
pub trait ObjectReader: Send + Sync {
    /// One object by kind, namespace (empty for cluster-scoped) and name, as JSON.
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, Refused>;
    /// Objects of a kind in a namespace (empty: all) matching the selector, as JSON.
    fn list(
        &self,
        kind: &KindRef,
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<String>, Refused>;
}

/// A read the reader refused, and why (the plugin gets it as `read-error.not-allowed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// A reader with nothing in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObjects;

impl ObjectReader for NoObjects {
    fn get(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<String>, Refused> {
        Ok(None)
    }
    fn list(&self, _: &KindRef, _: &str, _: &Selector) -> Result<Vec<String>, Refused> {
        Ok(Vec::new())
    }
}

/// An in-memory set of objects: what `render` reads from `--related` files, and what tests use.
#[derive(Debug, Default, Clone)]
pub struct StaticObjects {
    objects: Vec<Value>,
}

impl StaticObjects {
    /// A reader over these objects.
    pub fn new(objects: Vec<Value>) -> Self {
        Self { objects }
    }

    fn of_kind<'a>(
        &'a self,
        kind: &'a KindRef,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| {
            kind.matches(
                o["apiVersion"].as_str().unwrap_or(""),
                o["kind"].as_str().unwrap_or(""),
            ) && (namespace.is_empty()
                || o["metadata"]["namespace"].as_str().unwrap_or("") == namespace)
        })
    }
}

impl ObjectReader for StaticObjects {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, Refused> {
        Ok(self
            .of_kind(kind, namespace)
            .find(|o| o["metadata"]["name"] == name)
            .map(Value::to_string))
    }
    fn list(
        &self,
        kind: &KindRef,
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<String>, Refused> {
        Ok(self
            .of_kind(kind, namespace)
            .filter(|o| selector.matches_object(o))
            .map(Value::to_string)
            .collect())
    }
}

/// One read a call made. A change to what a read would now return is a reason to reconcile the
/// parent again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Read {
    /// `get(kind, namespace, name)`, whether or not the object existed.
    Get {
        /// The kind read.
        kind: KindRef,
        /// Namespace, empty for cluster-scoped.
        namespace: String,
        /// Name.
        name: String,
    },
    /// `list(kind, namespace, selector)`.
    List {
        /// The kind listed.
        kind: KindRef,
        /// Namespace, empty for all.
        namespace: String,
        /// The selector as the plugin wrote it.
        selector: String,
    },
}
