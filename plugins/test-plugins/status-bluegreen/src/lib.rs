//! Test plugin: a blue-green state machine kept in the parent's status, as Metacontroller
//! users write them. A `BlueGreen` parent serves `spec.version` from one colour's ConfigMap;
//! a new version goes Deploying (the other colour made beside the live one), Switching (the
//! new colour made active), Retiring (the old colour removed) and Live, one transition per
//! reconcile, each decided from the status the last one wrote. `status.replicas` copies what a
//! ReplicaSet's status would say, `terminatingReplicas` included: the field Kubernetes 1.35
//! added, which the test's CRD, written for an older version, does not declare.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, Value, json};

struct Plugin;

fn other(colour: &str) -> &'static str {
    if colour == "blue" { "green" } else { "blue" }
}

fn config_map(parent: &str, colour: &str, version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("{parent}-{colour}")},
        "data": {"version": version},
    })
}

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "status-bluegreen",
            Kind::new("test.reconhost.dev/v1", "BlueGreen"),
        )
        .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let name = request.name().to_owned();
        let wanted = request.spec_str("version").unwrap_or("v1").to_owned();
        let status = &request.parent["status"];
        let text = |field: &str| status[field].as_str().unwrap_or("").to_owned();
        let (phase, live, colour, target) = (
            text("phase"),
            text("liveVersion"),
            text("liveColour"),
            text("targetVersion"),
        );
        let next_colour = if colour.is_empty() {
            "blue"
        } else {
            other(&colour)
        };

        // Each arm: the next phase, and the live and target versions it leaves.
        let (next, live, colour, target) = match phase.as_str() {
            "" => ("Deploying", String::new(), String::new(), wanted.clone()),
            "Deploying" => ("Switching", live, colour, target),
            "Switching" => ("Retiring", target.clone(), next_colour.to_owned(), target),
            "Retiring" => ("Live", live, colour, target),
            _ if wanted != live => ("Deploying", live, colour, wanted.clone()),
            _ => ("Live", live, colour, target),
        };
        let mut children = Vec::new();
        if !live.is_empty() {
            children.push(config_map(&name, &colour, &live));
        }
        if matches!(next, "Deploying" | "Switching") {
            let new_colour = if colour.is_empty() {
                "blue"
            } else {
                other(&colour)
            };
            children.push(config_map(&name, new_colour, &target));
        }
        // Copied from what is observed, as a ReplicaSet's status counts its Pods: the children
        // there are, and those of them no longer wanted.
        let named = |c: &Value| c["metadata"]["name"].clone();
        let wanted_names: Vec<Value> = children.iter().map(named).collect();
        let terminating = request
            .children
            .iter()
            .filter(|c| !wanted_names.contains(&named(c.value())))
            .count();
        let mut history: Vec<Value> = status["history"].as_array().cloned().unwrap_or_default();
        if history.last().and_then(Value::as_str) != Some(next) {
            history.push(json!(next));
        }
        let mut response = Response::new();
        for child in children {
            response = response.child(child);
        }
        let response = response
            .status(json!({
                "phase": next,
                "liveVersion": live,
                "liveColour": colour,
                "targetVersion": target,
                "history": history,
                "replicas": {
                    "replicas": request.children.len(),
                    "terminatingReplicas": terminating,
                },
            }))
            .ready(next == "Live", next, &format!("serving {live}"));
        Ok(if next == "Live" {
            response
        } else {
            response.requeue_after_ms(200)
        })
    }
}

reconhost_sdk::export!(Plugin);
