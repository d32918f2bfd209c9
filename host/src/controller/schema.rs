//! The parent kind's status schema as the host needs it: which of its own status fields
//! ([`StatusFields`]) it may write, kept current by a watch on the kind's
//! CustomResourceDefinition, so a CRD upgraded to declare `conditions` gets them without a
//! restart, and one that drops them stops failing.
//!
//! What the kind lacks is said once per change of the schema: a log line, and a Warning event on
//! the first parent written after it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::cache::ResolvedKind;
use crate::planner::StatusFields;

/// The host's writable status fields for one parent kind.
pub struct ParentSchema {
    kind: String,
    fields: RwLock<StatusFields>,
    /// Whether what the schema lacks has been said since it last changed.
    said: AtomicBool,
    /// The dropped status fields said since the schema last changed.
    dropped: Mutex<BTreeSet<String>>,
}

/// How many dropped fields a kind remembers having said: past that, new ones are still pruned
/// and counted, not said, so plugins inventing keys cannot grow the host's memory.
const MAX_SAID_DROPPED: usize = 256;

impl ParentSchema {
    /// A schema admitting `fields` for the parent kind named `kind`.
    pub fn new(kind: impl Into<String>, fields: StatusFields) -> Self {
        let schema = Self {
            kind: kind.into(),
            fields: RwLock::new(fields),
            said: AtomicBool::new(false),
            dropped: Mutex::new(BTreeSet::new()),
        };
        schema.log();
        schema
    }

    /// The fields as of now.
    pub fn fields(&self) -> StatusFields {
        self.fields.read().expect("schema lock poisoned").clone()
    }

    /// What the kind lacks, the first time it is asked since the schema changed; `None` after
    /// that, or when it lacks nothing.
    pub fn unsaid_missing(&self) -> Option<String> {
        let missing = self.fields().missing()?;
        (!self.said.swap(true, Ordering::Relaxed)).then_some(missing)
    }

    /// Those of `dropped` (paths of a plugin's status the schema does not declare) not said
    /// since the schema last changed, now counted as said.
    pub fn unsaid_dropped(&self, dropped: &[String]) -> Vec<String> {
        let mut said = self.dropped.lock().expect("schema lock poisoned");
        dropped
            .iter()
            .filter(|path| said.len() < MAX_SAID_DROPPED && said.insert((*path).clone()))
            .cloned()
            .collect()
    }

    /// Takes a new version of the schema; returns whether the fields changed.
    fn update(&self, fields: StatusFields) -> bool {
        {
            let mut current = self.fields.write().expect("schema lock poisoned");
            if *current == fields {
                return false;
            }
            *current = fields;
        }
        self.said.store(false, Ordering::Relaxed);
        self.dropped.lock().expect("schema lock poisoned").clear();
        self.log();
        true
    }

    fn log(&self) {
        match self.fields().missing() {
            Some(missing) => warn!(kind = %self.kind, %missing,
                "the kind's status schema does not declare these fields; the host writes the plugin's status without them"),
            None => {
                debug!(kind = %self.kind, "the kind's status schema declares the host's fields")
            }
        }
    }
}

/// The CRD serving `kind` as JSON, or `None` if no CRD does (a built-in kind). A CRD is named
/// `<plural>.<group>`.
pub async fn crd_of(
    client: &kube::Client,
    kind: &ResolvedKind,
) -> Result<Option<Value>, kube::Error> {
    if kind.resource.group.is_empty() {
        return Ok(None);
    }
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let crd = crds.get_opt(&crd_name(kind)).await?;
    Ok(crd.map(|crd| serde_json::to_value(crd).unwrap_or(Value::Null)))
}

fn crd_name(kind: &ResolvedKind) -> String {
    format!("{}.{}", kind.resource.plural, kind.resource.group)
}

/// Keeps `schema` current with the CRD of `kind`; calls `changed` after the fields changed.
/// Runs until the handle is dropped.
pub fn watch(
    client: kube::Client,
    kind: &ResolvedKind,
    schema: Arc<ParentSchema>,
    changed: impl Fn() + Send + 'static,
) -> WatchHandle {
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", crd_name(kind)));
    let version = kind.resource.version.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(crds, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(crd) | Event::InitApply(crd)) => {
                    let crd = serde_json::to_value(crd).unwrap_or(Value::Null);
                    if schema.update(StatusFields::from_crd(&crd, &version)) {
                        changed();
                    }
                }
                Ok(_) => {}
                Err(error) => warn!(kind = %schema.kind, %error,
                    "watching the kind's CustomResourceDefinition failed; retrying with backoff"),
            }
        }
    });
    WatchHandle(task)
}

/// Stops the watch when dropped.
pub struct WatchHandle(JoinHandle<()>);

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn a_dropped_field_should_be_said_once_until_the_schema_changes() {
        let schema = ParentSchema::new("Legacy", StatusFields::all());
        let first = paths(&["status.a", "status.b"]);
        assert_eq!(schema.unsaid_dropped(&first), first);
        assert!(schema.unsaid_dropped(&first).is_empty());
        assert_eq!(
            schema.unsaid_dropped(&paths(&["status.a", "status.c"])),
            paths(&["status.c"])
        );
        let narrower = StatusFields::from_schema(&json!({"type": "object"}));
        assert!(schema.update(narrower));
        assert_eq!(schema.unsaid_dropped(&first), first);
    }

    #[test]
    fn what_is_remembered_as_said_should_be_bounded() {
        let schema = ParentSchema::new("Legacy", StatusFields::all());
        let many: Vec<String> = (0..MAX_SAID_DROPPED + 10)
            .map(|i| format!("status.k{i}"))
            .collect();
        assert_eq!(schema.unsaid_dropped(&many).len(), MAX_SAID_DROPPED);
        assert!(schema.unsaid_dropped(&many).is_empty());
    }
}
