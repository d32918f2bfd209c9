//! Test plugin: a `Release` parent (`spec.version`, `spec.replicas`) with one child kind per
//! update strategy (contract 0.2):
//!
//! - ConfigMap `<name>-settings`, `immutable: true`, the version in its data: `Recreate` (the API
//!   server refuses any change to an immutable ConfigMap's data);
//! - ServiceAccount `<name>`, the version in an annotation: `OnDelete`;
//! - Secrets `<name>-<i>` for each replica, the version in an annotation: `RollingInPlace`, an
//!   up-to-date Secret ready once someone has set its `approved` annotation to its version.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{
    Check, Comparison, Error, Info, Kind, Operand, Reconciler, Request, Response, UpdateMethod,
    UpdateStrategy, json,
};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        let approved = Check::field(
            "metadata.annotations.approved",
            Comparison::Equal,
            Operand::Field("metadata.annotations.version".into()),
        );
        Info::new(
            "order-release",
            Kind::new("test.reconhost.dev/v1", "Release"),
        )
        .child_with(
            Kind::new("v1", "ConfigMap"),
            UpdateStrategy::new(UpdateMethod::Recreate),
        )
        .child_with(
            Kind::new("v1", "ServiceAccount"),
            UpdateStrategy::new(UpdateMethod::OnDelete),
        )
        .child_with(
            Kind::new("v1", "Secret"),
            UpdateStrategy::new(UpdateMethod::RollingInPlace).status_check(approved),
        )
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let name = request.name().to_owned();
        let version = request.spec_str("version").unwrap_or("v1").to_owned();
        let replicas = request.parent["spec"]["replicas"].as_u64().unwrap_or(1);
        let mut response = Response::new()
            .child(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-settings")},
                "immutable": true,
                "data": {"version": version},
            }))
            .child(json!({
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "annotations": {"version": version}},
            }));
        for i in 0..replicas {
            response = response.child(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-{i}"), "annotations": {"version": version}},
            }));
        }
        Ok(response)
    }
}

reconhost_sdk::export!(Plugin);
