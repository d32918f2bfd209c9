//! `webapp`: a `WebApp` (examples.reconhost.dev/v1alpha1) becomes a Deployment and a Service.
//!
//! The Deployment runs one container named `app` with the image and port of the spec; the
//! Service maps port 80 to it. Status reports the Deployment's ready replicas and a `Ready`
//! condition that is True once they reach `spec.replicas`.
//!
//! Everything is typed, and small: the spec and the observed Deployment are read straight
//! from the host's JSON into structs that borrow from it, and the children are partial
//! objects written from structs with only the fields this plugin owns (as server-side apply
//! wants), rather than k8s-openapi's complete types, whose code for a Deployment alone would
//! be most of the component (see the SDK's docs).

use std::borrow::Cow;

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};
use serde::{Deserialize, Serialize};

/// The plugin.
pub struct WebApp;

/// `WebApp.spec`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec<'a> {
    /// Container image, required and non-empty (a missing image is reported as an empty one,
    /// so every language's `webapp` gives the same message). Borrowed from the parent's text
    /// unless it holds escapes.
    #[serde(default, borrow)]
    pub image: Cow<'a, str>,
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

/// What webapp reads of its observed Deployment; every other field is skipped unread.
#[derive(Deserialize)]
struct ObservedDeployment {
    #[serde(default)]
    status: Option<ObservedStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObservedStatus {
    #[serde(default)]
    ready_replicas: Option<i32>,
}

/// The labels of both children, and of the Deployment's pods.
#[derive(Serialize)]
struct Labels<'a> {
    #[serde(rename = "app.kubernetes.io/name")]
    name: &'a str,
    #[serde(rename = "app.kubernetes.io/managed-by")]
    managed_by: &'static str,
}

/// What selects the pods: the name label alone.
#[derive(Serialize)]
struct Selector<'a> {
    #[serde(rename = "app.kubernetes.io/name")]
    name: &'a str,
}

#[derive(Serialize)]
struct Metadata<'a> {
    name: &'a str,
    labels: &'a Labels<'a>,
}

/// The Deployment, as far as webapp owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Deployment<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    spec: DeploymentSpec<'a>,
}

#[derive(Serialize)]
struct DeploymentSpec<'a> {
    replicas: i32,
    selector: LabelSelector<'a>,
    template: PodTemplate<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelector<'a> {
    match_labels: &'a Selector<'a>,
}

#[derive(Serialize)]
struct PodTemplate<'a> {
    metadata: PodMetadata<'a>,
    spec: PodSpec<'a>,
}

#[derive(Serialize)]
struct PodMetadata<'a> {
    labels: &'a Labels<'a>,
}

#[derive(Serialize)]
struct PodSpec<'a> {
    containers: [Container<'a>; 1],
}

#[derive(Serialize)]
struct Container<'a> {
    name: &'static str,
    image: &'a str,
    ports: [ContainerPort; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContainerPort {
    container_port: i32,
    name: &'static str,
}

/// The Service, as far as webapp owns it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Service<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata<'a>,
    spec: ServiceSpec<'a>,
}

#[derive(Serialize)]
struct ServiceSpec<'a> {
    selector: &'a Selector<'a>,
    ports: [ServicePort; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServicePort {
    name: &'static str,
    port: i32,
    target_port: i32,
}

/// `WebApp.status`, as webapp sets it (the host adds observedGeneration and conditions).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    ready_replicas: i32,
}

impl Reconciler for WebApp {
    fn info() -> Info {
        Info::new(
            "webapp",
            Kind::new("examples.reconhost.dev/v1alpha1", "WebApp"),
        )
        .version(env!("CARGO_PKG_VERSION"))
        .child(Kind::new("apps/v1", "Deployment"))
        .child(Kind::new("v1", "Service"))
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
        let name = request.name();
        let labels = Labels {
            name,
            managed_by: "reconhost",
        };
        let selector = Selector { name };
        let metadata = || Metadata {
            name,
            labels: &labels,
        };

        let deployment = Deployment {
            api_version: "apps/v1",
            kind: "Deployment",
            metadata: metadata(),
            spec: DeploymentSpec {
                replicas: spec.replicas,
                selector: LabelSelector {
                    match_labels: &selector,
                },
                template: PodTemplate {
                    metadata: PodMetadata { labels: &labels },
                    spec: PodSpec {
                        containers: [Container {
                            name: "app",
                            image: &spec.image,
                            ports: [ContainerPort {
                                container_port: spec.port,
                                name: "http",
                            }],
                        }],
                    },
                },
            },
        };
        let service = Service {
            api_version: "v1",
            kind: "Service",
            metadata: metadata(),
            spec: ServiceSpec {
                selector: &selector,
                ports: [ServicePort {
                    name: "http",
                    port: 80,
                    target_port: spec.port,
                }],
            },
        };

        let ready_replicas = request
            .child("apps/v1", "Deployment", name)
            .and_then(|d| d.parse::<ObservedDeployment>().ok())
            .and_then(|d| d.status?.ready_replicas)
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
            .status(Status { ready_replicas })
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
    use reconhost_sdk::{ConditionStatus, Value, json};

    fn parent(spec: Value) -> Request {
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
        request.children.push(
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop"},
                "status": {"readyReplicas": 2}
            })
            .into(),
        );
        let response = WebApp::reconcile(request).unwrap();
        assert_eq!(response.status.unwrap().json(), r#"{"readyReplicas":2}"#);
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
