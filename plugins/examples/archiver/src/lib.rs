//! `archiver`: the finalizer example. An `Archive` keeps its `spec.data` in a ConfigMap named
//! after it. When the Archive is deleted, the plugin does not let go at once: it first rewrites
//! the ConfigMap to a tombstone (`archived: "true"` plus the number of keys it held) and records an
//! `Archiving` event; once the host has applied that and the plugin sees the tombstone among the
//! observed children, it reports `finalized` with an `Archived` event, and the host removes its
//! finalizer. Both steps are visible with kubectl while they happen.

use std::collections::BTreeMap;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct Archiver;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    data: BTreeMap<String, String>,
}

/// The ConfigMap, as far as the plugin owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMap<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    data: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
}

/// What the plugin reads of the observed ConfigMap: its data.
#[derive(Deserialize)]
struct Observed {
    #[serde(default)]
    data: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Status {
    phase: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<usize>,
}

impl Reconciler for Archiver {
    fn info() -> Info {
        Info::new(
            "archiver",
            Kind::new("examples.reconhost.dev/v1alpha1", "Archive"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(Kind::new("v1", "ConfigMap"))
        .finalizer()
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        let name = request.name();
        let config_map = |data| ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: Metadata { name },
            data,
        };
        let keys = spec.data.len();
        if !request.finalizing {
            return Ok(Response::new()
                .child(config_map(spec.data))
                .status(Status {
                    phase: "Active",
                    keys: Some(keys),
                })
                .ready(true, "Stored", "the data is stored"));
        }
        let tombstone = BTreeMap::from([
            ("archived".to_owned(), "true".to_owned()),
            ("keys".to_owned(), keys.to_string()),
        ]);
        let archived = request
            .child("v1", "ConfigMap", name)
            .and_then(|cm| cm.parse::<Observed>().ok())
            .is_some_and(|cm| cm.data == tombstone);
        if archived {
            Ok(Response::new()
                .child(config_map(tombstone))
                .status(Status {
                    phase: "Archived",
                    keys: None,
                })
                .event(
                    "Archived",
                    &format!("archived {keys} keys; releasing the finalizer"),
                )
                .finalized())
        } else {
            Ok(Response::new()
                .child(config_map(tombstone))
                .status(Status {
                    phase: "Archiving",
                    keys: None,
                })
                .event("Archiving", "writing the tombstone before deletion"))
        }
    }
}

reconhost_sdk::export!(Archiver);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::{Object, json};

    fn archive(finalizing: bool, children: Vec<Object>) -> Request {
        let mut r = Request::new(
            json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"data": {"x": "1"}}}),
        );
        r.finalizing = finalizing;
        r.children = children;
        r
    }

    #[test]
    fn deletion_should_write_the_tombstone_before_finalizing() {
        let first = Archiver::reconcile(archive(true, vec![])).unwrap();
        assert!(!first.finalized);
        assert_eq!(first.children[0].object["data"]["archived"], "true");
        let tombstone = first.children[0].object.clone();
        let second = Archiver::reconcile(archive(true, vec![tombstone])).unwrap();
        assert!(second.finalized);
        assert_eq!(second.events[0].reason, "Archived");
    }
}
