//! webapp's logic under another parent kind, so one host can run many distinct plugins in the
//! fleet benchmark. The kind and the plugin's name are fixed at build time.

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};

/// The group every fleet kind lives in.
const API_VERSION: &str = "fleet.bench.reconhost.dev/v1alpha1";
const KIND: &str = match option_env!("FLEET_KIND") {
    Some(kind) => kind,
    None => "App00",
};
const NAME: &str = match option_env!("FLEET_NAME") {
    Some(name) => name,
    None => "fleet-00",
};

struct Fleet;

impl Reconciler for Fleet {
    fn info() -> Info {
        Info::new(NAME, Kind::new(API_VERSION, KIND))
            .child(Kind::new("apps/v1", "Deployment"))
            .child(Kind::new("v1", "Service"))
    }

    fn reconcile(request: Request) -> Result<Response, Error> {
        webapp::WebApp::reconcile(request)
    }
}

reconhost_sdk::export!(Fleet);
