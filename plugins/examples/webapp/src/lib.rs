//! `webapp`: a `WebApp` (examples.reconhost.dev/v1alpha1) becomes a Deployment and a Service.
//!
//! The Deployment runs one container named `app` with the image and port of the spec; the
//! Service maps port 80 to it. Status reports the Deployment's ready replicas and a `Ready`
//! condition that is True once they reach `spec.replicas`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};
use serde::Deserialize;

/// The plugin.
pub struct WebApp;

/// `WebApp.spec`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// Container image, required and non-empty (a missing image is reported as an empty one,
    /// so every language's `webapp` gives the same message).
    #[serde(default)]
    pub image: String,
    /// Desired replicas, default 1.
    #[serde(default = "one")]
    pub replicas: i32,
    /// Container port, default 8080.
    #[serde(default = "default_port")]
    pub port: i32,
}

fn one() -> i32 {
    1
}

fn default_port() -> i32 {
    8080
}

impl Reconciler for WebApp {
    fn info() -> Info {
        Info::new(
            "webapp",
            Kind::new("examples.reconhost.dev/v1alpha1", "WebApp"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(Kind::of::<Deployment>())
        .child(Kind::of::<Service>())
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let spec: Spec = request.spec()?;
        if spec.image.trim().is_empty() {
            return Err(Error::permanent("spec.image must not be empty"));
        }
        if !(1..=65535).contains(&spec.port) {
            return Err(Error::permanent(format!(
                "spec.port must be between 1 and 65535, not {}",
                spec.port
            )));
        }
        if spec.replicas < 0 {
            return Err(Error::permanent(format!(
                "spec.replicas must not be negative, not {}",
                spec.replicas
            )));
        }
        let name = request.name().to_owned();
        let labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), name.clone()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "reconhost".to_owned(),
            ),
        ]);
        let selector = BTreeMap::from([("app.kubernetes.io/name".to_owned(), name.clone())]);
        let meta = ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels.clone()),
            ..Default::default()
        };

        let deployment = Deployment {
            metadata: meta.clone(),
            spec: Some(DeploymentSpec {
                replicas: Some(spec.replicas),
                selector: LabelSelector {
                    match_labels: Some(selector.clone()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "app".to_owned(),
                            image: Some(spec.image.clone()),
                            ports: Some(vec![ContainerPort {
                                container_port: spec.port,
                                name: Some("http".to_owned()),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: None,
        };
        let service = Service {
            metadata: meta,
            spec: Some(ServiceSpec {
                selector: Some(selector),
                ports: Some(vec![ServicePort {
                    name: Some("http".to_owned()),
                    port: 80,
                    target_port: Some(IntOrString::Int(spec.port)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        };

        let ready_replicas = request
            .child_as::<Deployment>(&name)
            .and_then(|d| d.status)
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        let ready = ready_replicas >= spec.replicas;
        let message = format!("{ready_replicas} of {} replicas ready", spec.replicas);
        let reason = if ready {
            "ReplicasReady"
        } else {
            "ReplicasNotReady"
        };
        Ok(Response::new()
            .child(deployment)
            .child(service)
            .status(json!({"readyReplicas": ready_replicas}))
            .ready(ready, reason, &message))
    }
}

// Behind a default feature so the fleet benchmark can link this logic into plugins of its own
// (host/benches/fleet/plugin), each exporting itself under another kind.
#[cfg(feature = "component")]
reconhost_sdk::export!(WebApp);

#[cfg(test)]
mod tests {
    use super::*;
    use reconhost_sdk::{ConditionStatus, json};

    fn parent(spec: serde_json::Value) -> Request {
        Request::new(json!({
            "apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "generation": 1}, "spec": spec
        }))
    }

    #[test]
    fn webapp_should_become_a_deployment_and_a_service() {
        let response = WebApp::reconcile(parent(json!({"image": "nginx:1.27"}))).unwrap();
        let [deployment, service] = &response.children[..] else {
            panic!("two children")
        };
        assert!(response.children.iter().all(|c| c.wave == 0));
        let (deployment, service) = (&deployment.object, &service.object);
        assert_eq!(deployment["kind"], "Deployment");
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["name"],
            "app"
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
            8080
        );
        assert_eq!(service["spec"]["ports"][0]["port"], 80);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
        assert_eq!(
            service["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "reconhost"
        );
        assert_eq!(response.conditions[0].status, ConditionStatus::False);
    }

    #[test]
    fn ready_replicas_should_come_from_the_observed_deployment() {
        let mut request = parent(json!({"image": "nginx", "replicas": 2}));
        request.children.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop"},
            "status": {"readyReplicas": 2}
        }));
        let response = WebApp::reconcile(request).unwrap();
        assert_eq!(response.status, Some(json!({"readyReplicas": 2})));
        assert_eq!(response.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn empty_image_should_be_a_permanent_error_naming_the_field() {
        let err = WebApp::reconcile(parent(json!({"image": ""}))).unwrap_err();
        assert_eq!(err, Error::permanent("spec.image must not be empty"));
        let err = WebApp::reconcile(parent(json!({"replicas": 2}))).unwrap_err();
        assert_eq!(
            err,
            Error::permanent("spec.image must not be empty"),
            "a missing image reads as an empty one"
        );
    }
}
