//! Test plugin: breaks one of the host's bounds on what a call may cause, chosen by the
//! parent's `spec.mode`: `events` (too many), `conditions` (too many), `status` (too large),
//! `synced` (sets the host's own condition), `metadata` (a server-set field on a child),
//! `finalizer` (a finalizer on a child), `message` (a long message full of control characters,
//! which the host escapes and cuts), `requeue` (asks to be called again after 1 ms).
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{
    ConditionStatus, Error, Info, Kind, Reconciler, Request, Response, Value, json,
};

struct Plugin;

fn config_map(metadata: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
}

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("side-effects", Kind::new("test.reconhost.dev/v1", "Widget"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let mode = request.parent["spec"]["mode"].as_str().unwrap_or("");
        let mut response = Response::new();
        match mode {
            "events" => {
                for i in 0..11 {
                    response = response.event(&format!("Step{i}"), "again");
                }
            }
            "conditions" => {
                for i in 0..17 {
                    response =
                        response.condition(&format!("Part{i}"), ConditionStatus::True, "Fine", "");
                }
            }
            "status" => response = response.status(json!({"blob": "x".repeat(300 << 10)})),
            "synced" => {
                response = response.condition("Synced", ConditionStatus::True, "Forged", "all good")
            }
            "metadata" => {
                response = response.child(config_map(json!({"name": "c", "resourceVersion": "1"})))
            }
            "finalizer" => {
                response = response.child(config_map(
                    json!({"name": "c", "finalizers": ["x.io/keep"]}),
                ))
            }
            "message" => {
                let message = format!(
                    "line\n{{\"level\":\"ERROR\"}}\u{1b}[2J{}",
                    "m".repeat(10_000)
                );
                response = response.warning("Noisy", &message).condition(
                    "Noisy",
                    ConditionStatus::False,
                    "Loud",
                    &message,
                );
            }
            "requeue" => response = response.requeue_after_ms(1),
            _ => {}
        }
        Ok(response)
    }
}

reconhost_sdk::export!(Plugin);
