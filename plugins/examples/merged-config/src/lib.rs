//! `merged-config`: a `MergedConfig` reads the ConfigMaps named in `spec.sources` (same
//! namespace) and produces one ConfigMap, named after it, holding their merged data; later
//! sources win. Missing sources are listed in `status.missing`.
//!
//! The reads go through `host::get`, so the host knows which ConfigMaps this parent depends on
//! and reconciles it again when one of them changes, appears or disappears.

use std::collections::BTreeMap;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, host};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct MergedConfig;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    sources: Vec<String>,
}

/// What the plugin reads of a source ConfigMap: its data, nothing else.
#[derive(Deserialize)]
struct Source {
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
}

/// The merged ConfigMap, as far as the plugin owns it.
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
    labels: Labels,
}

#[derive(Serialize)]
struct Labels {
    #[serde(rename = "app.kubernetes.io/managed-by")]
    managed_by: &'static str,
}

#[derive(Serialize)]
struct Status<'a> {
    missing: &'a [String],
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
                    let cm: Source = cm.parse().map_err(|e| {
                        Error::transient(format!("ConfigMap {source} is unreadable: {e}"))
                    })?;
                    merged.extend(cm.data.unwrap_or_default());
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
        let output = ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: Metadata {
                name: request.name(),
                labels: Labels {
                    managed_by: "reconhost",
                },
            },
            data: merged,
        };
        Ok(Response::new()
            .child(output)
            .status(Status { missing: &missing })
            .ready(
                complete,
                if complete { "Merged" } else { "SourcesMissing" },
                &message,
            ))
    }
}

reconhost_sdk::export!(MergedConfig);
