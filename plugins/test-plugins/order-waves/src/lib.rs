//! Test plugin: a `Stack` parent whose ConfigMaps come in three waves (contract 0.2): `<name>-a`
//! (wave 0), `<name>-b` (wave 1, ready once someone sets its `data.ready` to `"yes"`) and
//! `<name>-c` (wave 2). Each carries `spec.seed`, so a changed seed goes through the waves again.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Check, Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("order-waves", Kind::new("test.reconhost.dev/v1", "Stack"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let name = request.name().to_owned();
        let seed = request.spec_str("seed").unwrap_or("s0").to_owned();
        let config_map = |part: &str| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{part}")},
                "data": {"seed": seed},
            })
        };
        Ok(Response::new()
            .child_in_wave(0, config_map("a"), [])
            .child_in_wave(1, config_map("b"), [Check::equals("data.ready", "yes")])
            .child_in_wave(2, config_map("c"), []))
    }
}

reconhost_sdk::export!(Plugin);
