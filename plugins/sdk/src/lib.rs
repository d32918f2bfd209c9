//! Write reconhost reconcile plugins as plain Rust functions.
//!
//! A plugin reconciles one custom resource kind (the *parent*). The host watches, caches,
//! queues, retries and applies; the plugin only answers one question: given the parent and the
//! children the host observed, what should exist? Implement [`Reconciler`], call [`export!`],
//! and build with `cargo build --target wasm32-wasip2 --release`.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//!
//! use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response};
//! use serde::{Deserialize, Serialize};
//!
//! struct Greeter;
//!
//! /// `Greeting.spec`, read straight from the parent's JSON text.
//! #[derive(Deserialize)]
//! struct Spec {
//!     who: String,
//! }
//!
//! /// The child: a partial object with only the fields this plugin owns (server-side apply).
//! #[derive(Serialize)]
//! #[serde(rename_all = "camelCase")]
//! struct ConfigMap<'a> {
//!     api_version: &'static str,
//!     kind: &'static str,
//!     metadata: Metadata<'a>,
//!     data: BTreeMap<&'static str, String>,
//! }
//!
//! #[derive(Serialize)]
//! struct Metadata<'a> {
//!     name: &'a str,
//! }
//!
//! impl Reconciler for Greeter {
//!     fn info() -> Info {
//!         Info::new("greeter", Kind::new("examples.reconhost.dev/v1alpha1", "Greeting"))
//!             .child(Kind::new("v1", "ConfigMap"))
//!     }
//!
//!     fn reconcile(request: Request) -> Result<Response, Error> {
//!         let spec: Spec = request.spec()?;
//!         let config_map = ConfigMap {
//!             api_version: "v1",
//!             kind: "ConfigMap",
//!             metadata: Metadata { name: request.name() },
//!             data: BTreeMap::from([("greeting", format!("hello, {}", spec.who))]),
//!         };
//!         Ok(Response::new().child(config_map).ready(true, "Greeted", "the greeting exists"))
//!     }
//! }
//!
//! reconhost_sdk::export!(Greeter);
//! ```
//!
//! # Typed reads, small plugins
//!
//! The host sends each object as JSON text, and the SDK keeps it that way ([`Object`]) until
//! the plugin reads it: [`Request::spec`], [`Request::config`] and [`Object::parse`] read the
//! text straight into the plugin's own types (fields it does not name are skipped, `&str` and
//! `Cow<str>` fields can borrow from the text), and [`Response::child`] writes a child
//! straight to text. That is the path to take: it keeps a plugin's component and compiled code
//! small, which is what a host running many plugins spends its memory on, and its calls fast.
//!
//! Two conveniences cost more, and are there when they are worth it:
//!
//! - **Dynamic JSON**: `json!`, [`Object::value`] and indexing (`request.parent["spec"]`) go
//!   through `serde_json::Value`, which is parsed and built whole. A plugin that uses them
//!   links the `Value` code (tens of KiB) and allocates every field.
//! - **k8s-openapi's types**, with the SDK's `k8s-openapi` feature (`Kind::of`,
//!   `Request::child_as` and `reconhost_sdk::k8s_openapi`): complete, checked types for
//!   every built-in kind, whose (de)serialization code comes whole with them — about
//!   0.5 MiB of component to write a Deployment and as much again to read one, and seconds
//!   of compile time in the host. A struct with the fields the plugin sets is what server-side
//!   apply wants anyway (a partial object); use k8s-openapi for small types (a
//!   `LabelSelector`) or where its completeness matters more than size.
//!
//! The `webapp` example (plugins/examples/webapp) writes a Deployment and a Service this way;
//! docs/BENCHMARKS.md (*Small plugins through the SDK*) has its sizes and times.
//!
//! What the host guarantees and enforces (see the WIT contract, `reconhost:plugin@0.2.0`):
//!
//! - Every call runs in a fresh instance: globals, caches and statics start over each time.
//! - Children land in the parent's namespace and get the parent as controller ownerReference;
//!   do not set `metadata.namespace` to anything else or `metadata.ownerReferences` at all.
//! - An observed child missing from the response is deleted. Return every child every time.
//! - Children are partial objects for server-side apply: set only the fields you own.
//! - Calls run under a deadline and a memory cap; logs and output are capped per call.
//!
//! # Update strategies and waves
//!
//! Each child kind has an [`UpdateStrategy`]: how the host changes a child that exists but
//! differs from the desired one ([`UpdateMethod::InPlace`] by default; also never, delete and
//! recreate, and rolling one child at a time until it passes its status checks). Each child
//! has a wave ([`Response::child_in_wave`]): the host creates or changes the children of wave
//! n+1 only once every child of waves up to n exists as desired and passes its [`Check`]s.
//! [`Response::child`] puts a child in wave 0 with no checks of its own.
//!
//! ```no_run
//! use reconhost_sdk::{
//!     Check, ConditionStatus, Error, Info, Kind, Reconciler, Request, Response, UpdateMethod,
//!     UpdateStrategy, json,
//! };
//!
//! struct Shop;
//!
//! impl Reconciler for Shop {
//!     fn info() -> Info {
//!         Info::new("shop", Kind::new("examples.reconhost.dev/v1alpha1", "Shop"))
//!             .child(Kind::new("v1", "ConfigMap"))
//!             // Deployments change one at a time, each once the last is Available.
//!             .child_with(
//!                 Kind::new("apps/v1", "Deployment"),
//!                 UpdateStrategy::new(UpdateMethod::RollingInPlace)
//!                     .status_check(Check::condition("Available", ConditionStatus::True)),
//!             )
//!             .ignore_status_changes()
//!     }
//!
//!     fn reconcile(request: Request) -> Result<Response, Error> {
//!         let name = request.name();
//!         let deployment = |suffix: &str| json!({
//!             "apiVersion": "apps/v1", "kind": "Deployment",
//!             "metadata": {"name": format!("{name}-{suffix}")},
//!             // ...
//!         });
//!         Ok(Response::new()
//!             // Wave 0: the settings, ready as soon as they exist.
//!             .child(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
//!             // Wave 1: the database, which the front end waits for.
//!             .child_in_wave(1, deployment("db"), [
//!                 Check::condition("Available", ConditionStatus::True),
//!             ])
//!             // Wave 2: made only once the database is Available.
//!             .child_in_wave(2, deployment("web"), [])
//!             .parent_label("examples.reconhost.dev/tier", "web"))
//!     }
//! }
//!
//! reconhost_sdk::export!(Shop);
//! ```

mod check;
mod info;
mod object;
mod request;
mod response;

pub mod host;

pub use check::{Check, Comparison, Operand};
pub use info::{ChildKind, Info, Kind, UpdateMethod, UpdateStrategy};
#[cfg(feature = "k8s-openapi")]
pub use k8s_openapi;
pub use object::Object;
pub use request::Request;
pub use response::{
    Child, Condition, ConditionStatus, Error, Event, EventType, ParentMetadata, Response,
};
pub use serde_json::{self, Value, json};

/// A reconcile plugin. Both functions are called in fresh instances; neither can keep state.
pub trait Reconciler {
    /// Describes the plugin. Called once when the host loads it.
    fn info() -> Info;

    /// Computes the desired state of one parent.
    fn reconcile(request: Request) -> Result<Response, Error>;
}

/// Exports a [`Reconciler`] as the component's implementation of the contract.
///
/// Only has an effect when building for WebAssembly, so a plugin crate can also be compiled
/// natively (for unit tests and benchmarks) without exporting symbols.
#[macro_export]
macro_rules! export {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __ReconhostExport;
            impl $crate::__private::Guest for __ReconhostExport {
                fn info() -> $crate::__private::wit_types::PluginInfo {
                    $crate::__private::info::<$plugin>()
                }
                fn reconcile(
                    request: $crate::__private::wit_types::Request,
                ) -> ::core::result::Result<$crate::__private::wit_types::Response, $crate::__private::wit_types::Error> {
                    $crate::__private::reconcile::<$plugin>(request)
                }
            }
            $crate::__private::__export_reconciler!(__ReconhostExport with_types_in $crate::__private::wit);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    //! Glue for [`export!`]; not part of the API.
    pub use crate::wit::__export_reconciler;
    pub use crate::wit::Guest;
    pub use crate::wit::reconhost::plugin::types as wit_types;

    pub mod wit {
        pub use crate::wit::*;
    }

    use crate::{Reconciler, Request};

    pub fn info<P: Reconciler>() -> wit_types::PluginInfo {
        P::info().into_wit()
    }

    pub fn reconcile<P: Reconciler>(
        request: wit_types::Request,
    ) -> Result<wit_types::Response, wit_types::Error> {
        match P::reconcile(Request::from_wit(request)) {
            Ok(response) => Ok(response.into_wit()),
            Err(crate::Error::Transient(m)) => Err(wit_types::Error::Transient(m)),
            Err(crate::Error::Permanent(m)) => Err(wit_types::Error::Permanent(m)),
        }
    }
}

#[doc(hidden)]
mod wit {
    wit_bindgen::generate!({
        world: "reconciler",
        path: "../../wit/reconhost-plugin@0.2.0",
        // For the SDK's tests, which compare what crosses the boundary.
        additional_derives: [PartialEq],
        pub_export_macro: true,
        export_macro_name: "__export_reconciler",
        default_bindings_module: "reconhost_sdk::__private::wit",
    });
}
