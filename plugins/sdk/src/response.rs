//! The output of one reconcile, and plugin errors.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::wit::reconhost::plugin::types as wit;

/// The desired state of one parent. Build it with the chained methods.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    /// Desired children (partial objects for server-side apply).
    pub children: Vec<Value>,
    /// Desired status of the parent, `None` to leave it.
    pub status: Option<Value>,
    /// Conditions to merge into the parent's status.
    pub conditions: Vec<Condition>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
    /// Cleanup is done; the host may remove its finalizer.
    pub finalized: bool,
}

/// A condition on the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Type, e.g. `Ready`.
    pub type_: String,
    /// `Some(true)` is True, `Some(false)` False, `None` Unknown.
    pub status: Option<bool>,
    /// CamelCase reason.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

/// An event about the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Warning (true) or Normal (false).
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Message for people.
    pub message: String,
}

impl Response {
    /// An empty response: no children (so any observed child is deleted), status untouched.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a desired child: a JSON value or any serializable type (k8s-openapi objects).
    ///
    /// # Panics
    /// If `child` does not serialize to JSON, which cannot happen for k8s-openapi types or
    /// `serde_json::Value`.
    #[must_use]
    pub fn child(mut self, child: impl Serialize) -> Self {
        self.children
            .push(serde_json::to_value(child).expect("a child serializes to JSON"));
        self
    }

    /// Sets the desired status of the parent (the host adds observedGeneration and conditions).
    ///
    /// # Panics
    /// If `status` does not serialize to JSON.
    #[must_use]
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = Some(serde_json::to_value(status).expect("a status serializes to JSON"));
        self
    }

    /// Adds a condition.
    #[must_use]
    pub fn condition(
        mut self,
        type_: &str,
        status: Option<bool>,
        reason: &str,
        message: &str,
    ) -> Self {
        self.conditions.push(Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Adds the `Ready` condition.
    #[must_use]
    pub fn ready(self, ready: bool, reason: &str, message: &str) -> Self {
        self.condition("Ready", Some(ready), reason, message)
    }

    /// Adds a Normal event.
    #[must_use]
    pub fn event(mut self, reason: &str, message: &str) -> Self {
        self.events.push(Event {
            warning: false,
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Adds a Warning event.
    #[must_use]
    pub fn warning(mut self, reason: &str, message: &str) -> Self {
        self.events.push(Event {
            warning: true,
            reason: reason.into(),
            message: message.into(),
        });
        self
    }

    /// Asks to be called again after `after`, even if nothing changes.
    #[must_use]
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }

    /// Reports that cleanup is done (answer to [`crate::Request::finalizing`]).
    #[must_use]
    pub fn finalized(mut self) -> Self {
        self.finalized = true;
        self
    }

    pub(crate) fn into_wit(self) -> wit::Response {
        wit::Response {
            children: self.children.iter().map(Value::to_string).collect(),
            status: self.status.map(|s| s.to_string()),
            conditions: self
                .conditions
                .into_iter()
                .map(|c| wit::Condition {
                    type_: c.type_,
                    status: match c.status {
                        Some(true) => wit::ConditionStatus::True,
                        Some(false) => wit::ConditionStatus::False,
                        None => wit::ConditionStatus::Unknown,
                    },
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            events: self
                .events
                .into_iter()
                .map(|e| wit::Event {
                    type_: if e.warning {
                        wit::EventType::Warning
                    } else {
                        wit::EventType::Normal
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            requeue_after_ms: self.requeue_after.map(|d| d.as_millis() as u64),
            finalized: self.finalized,
        }
    }
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// May work later: retried with backoff.
    Transient(String),
    /// Will not work until the parent changes: not retried until then.
    Permanent(String),
}

impl Error {
    /// A transient error.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient(message.into())
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Permanent(message.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transient(m) => write!(f, "transient: {m}"),
            Self::Permanent(m) => write!(f, "permanent: {m}"),
        }
    }
}

impl std::error::Error for Error {}
