//! `merged-config`: a `MergedConfig` reads the ConfigMaps named in `spec.sources` (same
//! namespace) and produces one ConfigMap, named after it, holding their merged data; later
//! sources win. Missing sources are listed in `status.missing`.
//!
//! The reads go through `host::get`, so the host knows which ConfigMaps this parent depends on
//! and reconciles it again when one of them changes, appears or disappears.

use std::collections::BTreeMap;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, host, json};
use serde::Deserialize;

/// The plugin.
pub struct MergedConfig;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    sources: Vec<String>,
}

fn config_map() -> Kind {
    Kind::new("v1", "ConfigMap")
}

impl Reconciler for MergedConfig {
    fn info() -> Info {
        Info::new(
            "merged-config",
            Kind::new("examples.reconhost.dev/v1alpha1", "MergedConfig"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(config_map())
        .reads(config_map())
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        let mut merged = BTreeMap::new();
        let mut missing = Vec::new();
        for source in &spec.sources {
            if source == request.name() {
                return Err(Error::permanent(format!(
                    "spec.sources names the output ConfigMap {source:?} itself"
                )));
            }
            let found = host::get(&config_map(), request.namespace(), source)
                .map_err(|e| Error::transient(e.to_string()))?;
            match found {
                Some(cm) => {
                    if let Some(data) = cm["data"].as_object() {
                        for (k, v) in data {
                            merged.insert(k.clone(), v.clone());
                        }
                    }
                }
                None => missing.push(source.clone()),
            }
        }
        let complete = missing.is_empty();
        let message = if complete {
            format!("merged {} sources", spec.sources.len())
        } else {
            format!("missing sources: {}", missing.join(", "))
        };
        Ok(Response::new()
            .child(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": request.name(), "labels": {"app.kubernetes.io/managed-by": "reconhost"}},
                "data": merged,
            }))
            .status(json!({"missing": missing}))
            .ready(complete, if complete { "Merged" } else { "SourcesMissing" }, &message))
    }
}

reconhost_sdk::export!(MergedConfig);
