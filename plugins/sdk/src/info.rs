//! What a plugin declares about itself: its parent kind, its child kinds with their update
//! strategies, the kinds it reads.

use crate::Check;
use crate::wit::reconhost::plugin::types as wit;

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

    /// The kind of a k8s-openapi type, e.g. `Kind::of::<Deployment>()` (with the SDK's
    /// `k8s-openapi` feature).
    #[cfg(feature = "k8s-openapi")]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::API_VERSION, K::KIND)
    }

    pub(crate) fn to_wit(&self) -> wit::KindRef {
        wit::KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// How the host changes a child that exists but differs from what the plugin wants. A missing
/// child is always created and an unwanted one always deleted, whatever the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateMethod {
    /// Apply the change to the existing child (server-side apply). The default.
    #[default]
    InPlace,
    /// Never change an existing child; the desired state applies once someone deletes it
    /// (Metacontroller's default).
    OnDelete,
    /// Delete the child and create it anew on the next reconcile, for changes to fields the
    /// API server will not let change (immutable fields).
    Recreate,
    /// Like [`InPlace`](Self::InPlace), one child of the kind at a time: the next is changed
    /// only once every up-to-date child of the kind passes the
    /// [status checks](UpdateStrategy::status_checks).
    RollingInPlace,
    /// Like [`Recreate`](Self::Recreate), one child of the kind at a time, with the same rule
    /// as [`RollingInPlace`](Self::RollingInPlace).
    RollingRecreate,
}

impl UpdateMethod {
    fn to_wit(self) -> wit::UpdateMethod {
        match self {
            Self::InPlace => wit::UpdateMethod::InPlace,
            Self::OnDelete => wit::UpdateMethod::OnDelete,
            Self::Recreate => wit::UpdateMethod::Recreate,
            Self::RollingInPlace => wit::UpdateMethod::RollingInPlace,
            Self::RollingRecreate => wit::UpdateMethod::RollingRecreate,
        }
    }
}

/// The update strategy of one child kind: its [`UpdateMethod`] and, for the rolling methods,
/// what makes an up-to-date child ready. The default is [`UpdateMethod::InPlace`] with no
/// checks.
///
/// ```
/// use reconhost_sdk::{Check, ConditionStatus, UpdateMethod, UpdateStrategy};
///
/// // One Deployment at a time; the next only once the last one changed is Available.
/// let strategy = UpdateStrategy::new(UpdateMethod::RollingInPlace)
///     .status_check(Check::condition("Available", ConditionStatus::True));
/// assert_eq!(strategy.status_checks.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateStrategy {
    /// How existing children of the kind are changed.
    pub method: UpdateMethod,
    /// For the rolling methods: what makes an up-to-date child ready, besides the checks every
    /// child gets (not being deleted, and `status.observedGeneration`, where the child reports
    /// it, caught up with `metadata.generation`). Ignored by the other methods.
    pub status_checks: Vec<Check>,
}

impl UpdateStrategy {
    /// A strategy with this method and no status checks.
    pub fn new(method: UpdateMethod) -> Self {
        Self {
            method,
            status_checks: Vec::new(),
        }
    }

    /// Adds a status check (for the rolling methods).
    #[must_use]
    pub fn status_check(mut self, check: Check) -> Self {
        self.status_checks.push(check);
        self
    }

    pub(crate) fn to_wit(&self) -> wit::UpdateStrategy {
        wit::UpdateStrategy {
            method: self.method.to_wit(),
            status_checks: self.status_checks.iter().map(Check::to_wit).collect(),
        }
    }
}

/// A child kind the plugin creates, with how its existing children are changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildKind {
    /// The kind.
    pub kind: Kind,
    /// How its existing children are changed.
    pub strategy: UpdateStrategy,
}

impl ChildKind {
    pub(crate) fn to_wit(&self) -> wit::ChildKind {
        wit::ChildKind {
            kind: self.kind.to_wit(),
            update_strategy: self.strategy.to_wit(),
        }
    }
}

/// What a plugin declares about itself; see [`Reconciler::info`](crate::Reconciler::info). The
/// host reads it once, when it loads the plugin, and enforces it on every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// Short name, a DNS label (lower-case letters, digits, '-'). The host applies children
    /// with the field manager `reconhost/<name>`.
    pub name: String,
    /// The plugin's version, semver (informational; shown in logs and conditions).
    pub version: String,
    /// The kind it reconciles. One plugin per parent kind.
    pub parent: Kind,
    /// The kinds of children it creates, each with its update strategy. A desired child of
    /// any other kind is rejected.
    pub children: Vec<ChildKind>,
    /// The kinds it reads through [`host::get`](crate::host::get) and
    /// [`host::list`](crate::host::list); reading any other kind is refused.
    pub reads: Vec<Kind>,
    /// Whether the host keeps a finalizer on parents.
    pub finalizer: bool,
    /// Whether a change to the parent that touches only its `status` (or its
    /// `metadata.managedFields` and `resourceVersion`) should not call the plugin again.
    pub ignore_status_changes: bool,
}

impl Info {
    /// A plugin called `name` that reconciles `parent`, version `0.1.0`.
    pub fn new(name: &str, parent: Kind) -> Self {
        Self {
            name: name.to_owned(),
            version: "0.1.0".to_owned(),
            parent,
            children: Vec::new(),
            reads: Vec::new(),
            finalizer: false,
            ignore_status_changes: false,
        }
    }

    /// Sets the version.
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.to_owned();
        self
    }

    /// Declares a child kind, changed in place ([`UpdateMethod::InPlace`]).
    #[must_use]
    pub fn child(self, kind: Kind) -> Self {
        self.child_with(kind, UpdateStrategy::default())
    }

    /// Declares a child kind with its update strategy.
    #[must_use]
    pub fn child_with(mut self, kind: Kind, strategy: UpdateStrategy) -> Self {
        self.children.push(ChildKind { kind, strategy });
        self
    }

    /// Declares a kind the plugin reads.
    #[must_use]
    pub fn reads(mut self, kind: Kind) -> Self {
        self.reads.push(kind);
        self
    }

    /// Asks for a finalizer: on deletion the plugin is called with
    /// [`Request::finalizing`](crate::Request::finalizing) set until it answers
    /// [`Response::finalized`](crate::Response::finalized).
    #[must_use]
    pub fn finalizer(mut self) -> Self {
        self.finalizer = true;
        self
    }

    /// Asks not to be called again for a change to the parent that touches only its `status`
    /// (or its `metadata.managedFields` and `resourceVersion`): for plugins whose answer does
    /// not depend on the parent's status.
    #[must_use]
    pub fn ignore_status_changes(mut self) -> Self {
        self.ignore_status_changes = true;
        self
    }

    pub(crate) fn into_wit(self) -> wit::PluginInfo {
        wit::PluginInfo {
            name: self.name,
            version: self.version,
            parent: self.parent.to_wit(),
            children: self.children.iter().map(ChildKind::to_wit).collect(),
            reads: self.reads.iter().map(Kind::to_wit).collect(),
            finalizer: self.finalizer,
            ignore_status_changes: self.ignore_status_changes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Comparison, ConditionStatus, Operand};

    fn kind_ref(api_version: &str, kind: &str) -> wit::KindRef {
        wit::KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn info_should_carry_every_declaration_into_the_contract() {
        let info = Info::new("shop", Kind::new("example.com/v1", "Shop"))
            .version("1.2.3")
            .child(Kind::new("v1", "ConfigMap"))
            .child_with(
                Kind::new("apps/v1", "Deployment"),
                UpdateStrategy::new(UpdateMethod::RollingInPlace)
                    .status_check(Check::condition("Available", ConditionStatus::True))
                    .status_check(Check::field(
                        "status.readyReplicas",
                        Comparison::AtLeast,
                        Operand::Field("spec.replicas".into()),
                    )),
            )
            .reads(Kind::new("v1", "Secret"))
            .finalizer()
            .ignore_status_changes();
        assert_eq!(
            info.into_wit(),
            wit::PluginInfo {
                name: "shop".into(),
                version: "1.2.3".into(),
                parent: kind_ref("example.com/v1", "Shop"),
                children: vec![
                    wit::ChildKind {
                        kind: kind_ref("v1", "ConfigMap"),
                        update_strategy: wit::UpdateStrategy {
                            method: wit::UpdateMethod::InPlace,
                            status_checks: vec![],
                        },
                    },
                    wit::ChildKind {
                        kind: kind_ref("apps/v1", "Deployment"),
                        update_strategy: wit::UpdateStrategy {
                            method: wit::UpdateMethod::RollingInPlace,
                            status_checks: vec![
                                wit::ReadyCheck::Condition(wit::ConditionCheck {
                                    type_: "Available".into(),
                                    status: wit::ConditionStatus::True,
                                }),
                                wit::ReadyCheck::Field(wit::FieldCheck {
                                    path: "status.readyReplicas".into(),
                                    comparison: wit::Comparison::AtLeast,
                                    operand: wit::Operand::Field("spec.replicas".into()),
                                }),
                            ],
                        },
                    },
                ],
                reads: vec![kind_ref("v1", "Secret")],
                finalizer: true,
                ignore_status_changes: true,
            }
        );
    }

    #[test]
    fn info_should_default_to_no_finalizer_and_every_status_change() {
        let info = Info::new("shop", Kind::new("example.com/v1", "Shop")).into_wit();
        assert_eq!(info.version, "0.1.0");
        assert!(!info.finalizer);
        assert!(!info.ignore_status_changes);
        assert!(info.children.is_empty() && info.reads.is_empty());
    }

    #[test]
    fn every_update_method_should_map_to_its_contract_case() {
        for (method, expected) in [
            (UpdateMethod::InPlace, wit::UpdateMethod::InPlace),
            (UpdateMethod::OnDelete, wit::UpdateMethod::OnDelete),
            (UpdateMethod::Recreate, wit::UpdateMethod::Recreate),
            (
                UpdateMethod::RollingInPlace,
                wit::UpdateMethod::RollingInPlace,
            ),
            (
                UpdateMethod::RollingRecreate,
                wit::UpdateMethod::RollingRecreate,
            ),
        ] {
            assert_eq!(
                UpdateStrategy::new(method).to_wit().method,
                expected,
                "{method:?}"
            );
        }
        assert_eq!(
            UpdateStrategy::default(),
            UpdateStrategy::new(UpdateMethod::InPlace)
        );
        assert_eq!(UpdateMethod::default(), UpdateMethod::InPlace);
    }
}
