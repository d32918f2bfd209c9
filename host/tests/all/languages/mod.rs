//! Plugins in Python and TypeScript beside the Rust ones: the same contract, the same sandbox,
//! the same results.
//!
//! - `conformance`: the `webapp` example in Rust, Python (componentize-py) and TypeScript
//!   (componentize-js) is built against the same contract (0.2.0), declares the same plugin and
//!   gives the same children (with their waves and readiness checks), status, conditions, events,
//!   parent metadata and errors on every fixture of the Rust example and on every invalid spec.
//! - `sandbox`: Python and JavaScript plugins (0.2.0, as their SDKs build) that loop, allocate
//!   without bound, raise and answer garbage fail their own call with the typed error the Rust
//!   ones get, within the deadline, and the next call works.
//! - `live`: the Python and TypeScript `webapp` installed through ReconcilePlugins from the
//!   loopback OCI registry reconcile parents on the control plane, and compiling them holds up no
//!   other plugin.
//!
//! The components are built by `make plugins` (plugins/python/build.sh, plugins/js/build.sh).

use crate::common;

mod conformance;
mod live;
mod sandbox;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use reconhost::model::ReconcileRequest;
use reconhost::runtime::{
    CallErrorKind, Limits, NoObjects, Outcome, Plugin, Runtime, RuntimeConfig,
};

/// The `webapp` of every language, Rust first (the reference).
const WEBAPPS: [&str; 3] = ["webapp", "webapp-python", "webapp-ts"];

/// The contract every SDK builds against, as the host reports the one a component names.
const CONTRACT: &str = "reconhost:plugin@0.2.0";

/// One runtime for the process, with the default (persistent) compiled-code cache: the 12–20 MB
/// Python and JavaScript components compile once per machine, as they do in a host.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeConfig::default()).expect("engine"))
}

/// A component loaded once per process and shared by the tests that use it, with `limits`
/// (the first caller's limits win; every caller of a name passes the same).
fn loaded(name: &str, limits: Limits) -> &'static Plugin {
    static LOADED: LazyLock<Mutex<HashMap<String, &'static OnceLock<Plugin>>>> =
        LazyLock::new(Default::default);
    let cell: &'static OnceLock<Plugin> = LOADED
        .lock()
        .expect("the plugin table")
        .entry(name.to_owned())
        .or_insert_with(|| Box::leak(Box::new(OnceLock::new())));
    cell.get_or_init(|| {
        let path = common::plugin(name);
        let bytes = std::fs::read(&path).expect("reading the component");
        Plugin::load(runtime(), name, &bytes, limits)
            .unwrap_or_else(|e| panic!("loading {name}: {e}"))
    })
}

/// One call with no readable objects; the error, if any, with the plugin's name checked.
fn call(plugin: &Plugin, request: &ReconcileRequest) -> Result<Outcome, CallErrorKind> {
    plugin.reconcile(request, Arc::new(NoObjects)).map_err(|e| {
        assert_eq!(e.plugin, plugin.info().name, "the error names the plugin");
        e.kind
    })
}
