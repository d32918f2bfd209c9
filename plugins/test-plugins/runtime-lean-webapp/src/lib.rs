//! Test plugin: `webapp`'s logic written on the raw contract the way a lean SDK path would run
//! it: the parent and children parsed into borrowed structs (no `serde_json::Value`), the
//! children written from small `Serialize` structs (no k8s-openapi). The runtime tests require
//! the same answers as `webapp`; the benchmark times both, so the lever is measured in the
//! product, not guessed. The fleet benchmark (`FLEET_LEAN=1`) also builds it under kinds of its
//! own, which `FLEET_API_VERSION`, `FLEET_KIND` and `FLEET_NAME` set at build time.
#![allow(missing_docs, reason = "a test fixture")]

wit_bindgen::generate!({ world: "reconciler", path: "../../../wit/reconhost-plugin@0.1.0" });

use std::borrow::Cow;
use std::collections::BTreeMap;

use reconhost::plugin::types::{Condition, ConditionStatus, KindRef};
use serde::{Deserialize, Serialize};

struct Plugin;

const API_VERSION: &str = match option_env!("FLEET_API_VERSION") {
    Some(v) => v,
    None => "examples.reconhost.dev/v1alpha1",
};
const KIND: &str = match option_env!("FLEET_KIND") {
    Some(k) => k,
    None => "WebApp",
};
const NAME: &str = match option_env!("FLEET_NAME") {
    Some(n) => n,
    None => "runtime-lean-webapp",
};

#[derive(Deserialize)]
struct Parent<'a> {
    #[serde(borrow)]
    metadata: Name<'a>,
    #[serde(default, borrow)]
    spec: Option<Spec<'a>>,
}

#[derive(Deserialize)]
struct Name<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec<'a> {
    #[serde(borrow)]
    image: Cow<'a, str>,
    #[serde(default = "one")]
    replicas: i32,
    #[serde(default = "default_port")]
    port: i32,
}

fn one() -> i32 {
    1
}

fn default_port() -> i32 {
    8080
}

#[derive(Deserialize)]
struct Child<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    metadata: Name<'a>,
    #[serde(default)]
    status: Option<ChildStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChildStatus {
    ready_replicas: Option<i32>,
}

type Labels<'a> = BTreeMap<&'static str, &'a str>;

#[derive(Serialize)]
struct Meta<'a> {
    name: &'a str,
    labels: &'a Labels<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Deployment<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta<'a>,
    spec: DeploymentSpec<'a>,
}

#[derive(Serialize)]
struct DeploymentSpec<'a> {
    replicas: i32,
    selector: Selector<'a>,
    template: Template<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Selector<'a> {
    match_labels: &'a Labels<'a>,
}

#[derive(Serialize)]
struct Template<'a> {
    metadata: TemplateMeta<'a>,
    spec: PodSpec<'a>,
}

#[derive(Serialize)]
struct TemplateMeta<'a> {
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Service<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta<'a>,
    spec: ServiceSpec<'a>,
}

#[derive(Serialize)]
struct ServiceSpec<'a> {
    selector: &'a Labels<'a>,
    ports: [ServicePort; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServicePort {
    name: &'static str,
    port: i32,
    target_port: i32,
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain structs serialize")
}

fn permanent(message: String) -> Error {
    Error::Permanent(message)
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        let kind = |api_version: &str, kind: &str| KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        };
        PluginInfo {
            name: NAME.into(),
            version: "0.1.0".into(),
            parent: kind(API_VERSION, KIND),
            children: vec![kind("apps/v1", "Deployment"), kind("v1", "Service")],
            reads: vec![],
            finalizer: false,
        }
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let parent: Parent = serde_json::from_str(&request.parent)
            .map_err(|e| permanent(format!("the parent is not a WebApp: {e}")))?;
        let spec = parent
            .spec
            .ok_or_else(|| permanent("spec is missing".into()))?;
        if spec.image.trim().is_empty() {
            return Err(permanent("spec.image must not be empty".into()));
        }
        if !(1..=65535).contains(&spec.port) {
            return Err(permanent(format!(
                "spec.port must be between 1 and 65535, not {}",
                spec.port
            )));
        }
        if spec.replicas < 0 {
            return Err(permanent(format!(
                "spec.replicas must not be negative, not {}",
                spec.replicas
            )));
        }
        let name: &str = &parent.metadata.name;
        let labels: Labels = BTreeMap::from([
            ("app.kubernetes.io/name", name),
            ("app.kubernetes.io/managed-by", "reconhost"),
        ]);
        let selector: Labels = BTreeMap::from([("app.kubernetes.io/name", name)]);
        let meta = || Meta {
            name,
            labels: &labels,
        };
        let deployment = Deployment {
            api_version: "apps/v1",
            kind: "Deployment",
            metadata: meta(),
            spec: DeploymentSpec {
                replicas: spec.replicas,
                selector: Selector {
                    match_labels: &selector,
                },
                template: Template {
                    metadata: TemplateMeta { labels: &labels },
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
            metadata: meta(),
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
            .children
            .iter()
            .filter_map(|c| serde_json::from_str::<Child>(c).ok())
            .find(|c| c.kind == "Deployment" && c.metadata.name == name)
            .and_then(|c| c.status?.ready_replicas)
            .unwrap_or(0);
        let ready = ready_replicas >= spec.replicas;
        Ok(Response {
            children: vec![json(&deployment), json(&service)],
            status: Some(format!("{{\"readyReplicas\":{ready_replicas}}}")),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: if ready {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                },
                reason: if ready {
                    "ReplicasReady"
                } else {
                    "ReplicasNotReady"
                }
                .into(),
                message: format!("{ready_replicas} of {} replicas ready", spec.replicas),
            }],
            events: vec![],
            requeue_after_ms: None,
            finalized: false,
        })
    }
}

export!(Plugin);
