//! Write reconhost reconcile plugins as plain Rust functions.
//!
//! A plugin reconciles one custom resource kind (the *parent*). The host watches, caches,
//! queues, retries and applies; the plugin only answers one question: given the parent and the
//! children the host observed, what should exist? Implement [`Reconciler`], call [`export!`],
//! and build with `cargo build --target wasm32-wasip2 --release`.
//!
//! ```no_run
//! use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};
//!
//! struct Greeter;
//!
//! impl Reconciler for Greeter {
//!     fn info() -> Info {
//!         Info::new("greeter", Kind::new("examples.reconhost.dev/v1alpha1", "Greeting"))
//!             .child(Kind::new("v1", "ConfigMap"))
//!     }
//!
//!     fn reconcile(request: Request) -> Result<Response, Error> {
//!         let who = request.spec_str("who").ok_or_else(|| Error::permanent("spec.who is required"))?;
//!         let config_map = json!({
//!             "apiVersion": "v1",
//!             "kind": "ConfigMap",
//!             "metadata": {"name": request.name()},
//!             "data": {"greeting": format!("hello, {who}")},
//!         });
//!         Ok(Response::new().child(config_map).ready(true, "Greeted", "the greeting exists"))
//!     }
//! }
//!
//! reconhost_sdk::export!(Greeter);
//! ```
//!
//! What the host guarantees and enforces (see the WIT contract, `reconhost:plugin@0.1.0`):
//!
//! - Every call runs in a fresh instance: globals, caches and statics start over each time.
//! - Children land in the parent's namespace and get the parent as controller ownerReference;
//!   do not set `metadata.namespace` to anything else or `metadata.ownerReferences` at all.
//! - An observed child missing from the response is deleted. Return every child every time.
//! - Children are partial objects for server-side apply: set only the fields you own.
//! - Calls run under a deadline and a memory cap; logs and output are capped per call.

mod request;
mod response;

pub mod host;

pub use k8s_openapi;
pub use request::Request;
pub use response::{Condition, Error, Event, Response};
pub use serde_json::{self, Value, json};

/// A kind of Kubernetes object: apiVersion and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind.
    pub kind: String,
}

impl Kind {
    /// A kind from its apiVersion and kind, e.g. `Kind::new("apps/v1", "Deployment")`.
    pub fn new(api_version: &str, kind: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// The kind of a k8s-openapi type, e.g. `Kind::of::<Deployment>()`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::API_VERSION, K::KIND)
    }
}

/// What a plugin declares about itself; see [`Reconciler::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// Short name, a DNS label (lower-case letters, digits, '-').
    pub name: String,
    /// The plugin's version; defaults to the crate version of the SDK user.
    pub version: String,
    /// The kind it reconciles.
    pub parent: Kind,
    /// The kinds of children it creates.
    pub children: Vec<Kind>,
    /// The kinds it reads through [`host::get`] and [`host::list`].
    pub reads: Vec<Kind>,
    /// Whether the host keeps a finalizer on parents.
    pub finalizer: bool,
}

impl Info {
    /// A plugin called `name` that reconciles `parent`.
    pub fn new(name: &str, parent: Kind) -> Self {
        Self {
            name: name.to_owned(),
            version: "0.1.0".to_owned(),
            parent,
            children: Vec::new(),
            reads: Vec::new(),
            finalizer: false,
        }
    }

    /// Sets the version.
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.to_owned();
        self
    }

    /// Declares a child kind.
    #[must_use]
    pub fn child(mut self, kind: Kind) -> Self {
        self.children.push(kind);
        self
    }

    /// Declares a kind the plugin reads.
    #[must_use]
    pub fn reads(mut self, kind: Kind) -> Self {
        self.reads.push(kind);
        self
    }

    /// Asks for a finalizer: on deletion the plugin is called with
    /// [`Request::finalizing`] set until it answers [`Response::finalized`].
    #[must_use]
    pub fn finalizer(mut self) -> Self {
        self.finalizer = true;
        self
    }
}

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

    fn kind(k: crate::Kind) -> wit_types::KindRef {
        wit_types::KindRef {
            api_version: k.api_version,
            kind: k.kind,
        }
    }

    pub fn info<P: Reconciler>() -> wit_types::PluginInfo {
        let info = P::info();
        wit_types::PluginInfo {
            name: info.name,
            version: info.version,
            parent: kind(info.parent),
            children: info.children.into_iter().map(kind).collect(),
            reads: info.reads.into_iter().map(kind).collect(),
            finalizer: info.finalizer,
        }
    }

    pub fn reconcile<P: Reconciler>(
        request: wit_types::Request,
    ) -> Result<wit_types::Response, wit_types::Error> {
        let request = Request::from_wit(request).map_err(wit_types::Error::Permanent)?;
        match P::reconcile(request) {
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
        path: "../../wit/reconhost-plugin@0.1.0",
        pub_export_macro: true,
        export_macro_name: "__export_reconciler",
        default_bindings_module: "reconhost_sdk::__private::wit",
    });
}
