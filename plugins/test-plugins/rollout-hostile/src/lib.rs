//! Test plugin: a hostile candidate version of `canary`. On a parent whose `spec.value` is even
//! it loops until the host stops it; on the others it asks for fifty events.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("canary", Kind::new("test.reconhost.dev/v1", "Canary"))
            .version("4.0.0")
            .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        let value = request.parent["spec"]["value"].as_i64().unwrap_or(0);
        if value % 2 == 0 {
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        let mut response = Response::new();
        for n in 0..50 {
            response = response.event("Flood", &format!("event {n}"));
        }
        Ok(response)
    }
}

reconhost_sdk::export!(Plugin);
