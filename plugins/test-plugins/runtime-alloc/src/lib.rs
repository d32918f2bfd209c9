//! Test plugin: allocates without bound. Its parent is a Stamp, so that the hostile suite can
//! install it in a cluster (the runtime suite calls it with any parent).
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

struct Plugin;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new("runtime-alloc", Kind::new("test.reconhost.dev/v1", "Stamp"))
            .child(Kind::new("v1", "ConfigMap"))
    }

    #[allow(
        unused_variables,
        unreachable_code,
        reason = "each fixture misbehaves in its own way"
    )]
    fn reconcile(request: Request) -> Result<Response, Error> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
        }
    }
}

reconhost_sdk::export!(Plugin);
