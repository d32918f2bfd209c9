//! The identities the rest of the host speaks of, on the lowest floor so that no module has to
//! reach into the caches for them: a kind across versions ([`GroupKind`]), a kind as discovery
//! resolved it ([`ResolvedKind`]), an object of a kind ([`ObjectKey`]), one version of a plugin
//! serving a controller ([`RevisionId`]).

use std::fmt;

use kube::core::discovery::ApiResource;

use crate::model::KindRef;

/// Namespace (empty for cluster-scoped objects) and name: the identity of an object of a kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A kind's identity across versions: the API server converts between versions of a group, so
/// one cache serves every version a plugin names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind {
    /// API group, empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

impl GroupKind {
    /// The GroupKind of an `apiVersion` and `kind`.
    pub fn of(api_version: &str, kind: &str) -> Self {
        Self {
            group: crate::model::group_of(api_version).to_owned(),
            kind: kind.to_owned(),
        }
    }
}

impl From<&KindRef> for GroupKind {
    fn from(kind: &KindRef) -> Self {
        Self::of(&kind.api_version, &kind.kind)
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// A kind as discovery resolved it.
#[derive(Debug, Clone)]
pub struct ResolvedKind {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// Whether the kind has a status subresource.
    pub has_status: bool,
}

impl ResolvedKind {
    /// The kind's identity across versions.
    pub fn group_kind(&self) -> GroupKind {
        GroupKind {
            group: self.resource.group.clone(),
            kind: self.resource.kind.clone(),
        }
    }
}

/// One revision of a plugin within its controller: numbered in the order the controller
/// prepared them, never reused while the controller lives. What the host remembers about a
/// parent is stamped with the revision that wrote it, so new code starts afresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RevisionId(pub u64);

impl fmt::Display for RevisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}
