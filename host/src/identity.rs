//! Acting as a plugin's ServiceAccount, so the API server's RBAC bounds each plugin and the host
//! never lends a plugin its own authority.
//!
//! - Writes made for a plugin (children, the parent's status and finalizers, events) go through
//!   [`impersonating`]: the host's client, over its shared connection pool, with
//!   `Impersonate-User: system:serviceaccount:<ns>:<name>` on every request and no group
//!   headers, so the API server gives the ServiceAccount its own groups and judges it alone.
//! - Reads stay served from the shared caches, which the host fills with its own rights; each
//!   read is allowed only where the ServiceAccount could read through the API server, as
//!   [`access`] finds out with SubjectAccessReviews (cached).
//! - [`rbac`] derives what a plugin needs from what it declares, for `reconhost plugin rbac` and
//!   for the `Authorized` condition, and says which of it is dangerous; [`grant`] makes the RBAC
//!   objects that grant it where the plugin's parents live.

pub mod access;
pub mod bindings;
pub mod grant;
pub mod rbac;

use std::fmt;

use http::{HeaderValue, Request};
use kube::client::Body;

/// A plugin's ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    /// Its namespace: the plugin's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Identity {
    /// A ServiceAccount by namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The user name the API server knows it by.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups the API server gives it (what a SubjectAccessReview must name).
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".to_owned(),
        ]
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The header that makes a request the ServiceAccount's.
const IMPERSONATE_USER: &str = "impersonate-user";

/// A client that sends every request as `identity`, through `base`'s connections (no client,
/// pool or TLS session per plugin). The header is set, not appended, so a request can never
/// carry two identities.
pub fn impersonating(base: &kube::Client, identity: &Identity) -> kube::Client {
    // ServiceAccount names and namespaces are DNS labels and subdomains: always a valid header.
    let user = HeaderValue::from_str(&identity.user()).expect("a ServiceAccount user name");
    let base = base.clone();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let (base, user) = (base.clone(), user.clone());
        async move {
            request.headers_mut().insert(IMPERSONATE_USER, user);
            base.send(request).await
        }
    });
    kube::Client::new(service, identity.namespace.clone())
}
