//! The host's own resource: `ReconcilePlugin` (`reconhost.dev/v1alpha1`, cluster-scoped,
//! short name `rp`), one per parent kind, which installs a plugin while the host runs.
//!
//! The CRD under deploy/crds/ is generated from these types (`reconhost crds`, `make crds`) and a
//! test fails when the two drift. The API server enforces what it can (CEL rules below): one
//! ReconcilePlugin per parent kind by its name, an immutable parent, exactly one source, a
//! pinned digest, bounded limits. The host checks the rest when it loads the plugin.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::KindRef;

pub mod rollout;

pub use self::rollout::{
    HistoryEntry, RevisionStatus, Rollout, RolloutStatus, ShadowStatus, Step, Strategy, Thresholds,
};

/// The API group of the host's resources.
pub const GROUP: &str = "reconhost.dev";

/// The finalizer the host keeps on every ReconcilePlugin, so an uninstall always releases the
/// plugin's parents before the resource goes.
pub const UNINSTALL_FINALIZER: &str = "reconhost.dev/uninstall";

/// The field manager of the host's own writes (ReconcilePlugin status and finalizers).
pub const HOST_FIELD_MANAGER: &str = "reconhost";

/// Installs a reconcile plugin for one parent kind: where its component comes from, pinned by
/// digest; the ServiceAccount it acts as; its limits and configuration.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "reconhost.dev",
    version = "v1alpha1",
    kind = "ReconcilePlugin",
    plural = "reconcileplugins",
    shortname = "rp",
    category = "reconhost",
    status = "ReconcilePluginStatus",
    doc = "Installs a reconcile plugin for one parent kind",
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent.kind"),
    // A digest (71 characters) and a rollout stage that is mostly empty would push `kubectl
    // get rp` past a terminal's width: they show with `-o wide`.
    printcolumn(
        name = "Digest",
        type_ = "string",
        priority = 1,
        json_path = ".status.activeDigest"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.plugin.version"),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        priority = 1,
        json_path = ".status.rollout.stage"
    ),
    printcolumn(
        name = "Candidate",
        type_ = "string",
        priority = 1,
        json_path = ".status.rollout.candidate"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        priority = 1,
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(NAME_RULE).message(NAME_MESSAGE)
)]
// `namespace` is a reserved word in CEL; Kubernetes spells the field `__namespace__` there.
#[x_kube(
    validation = Rule::new(
        "!has(self.source.configMap) || self.source.configMap.__namespace__ == self.serviceAccountRef.__namespace__"
    )
    .message("spec.source.configMap must be in the namespace of spec.serviceAccountRef (the plugin's namespace)")
)]
#[x_kube(
    validation = Rule::new("has(self.decorator) == has(oldSelf.decorator)")
        .message("spec.decorator cannot be added or removed: a decorator's children are told apart from an owner's; install another ReconcilePlugin")
)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilePluginSpec {
    /// The kind this plugin reconciles. Immutable: to reconcile another kind, install another
    /// ReconcilePlugin.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.parent is immutable"))]
    pub parent: ParentRef,
    /// Where the component comes from, and its digest.
    pub source: Source,
    /// The ServiceAccount the plugin acts as. Its namespace is the plugin's namespace: the
    /// ConfigMap and pull Secret of the source are read there.
    pub service_account_ref: ServiceAccountRef,
    /// Limits of every call; each unset limit takes the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimits>,
    /// Free-form configuration, handed to every reconcile as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config: Option<Value>,
    /// Stops new reconciles while true; changes keep queueing and are worked off on resume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Only parents whose labels match are reconciled; the others are not written to at all. A
    /// parent that stops matching is released (the plugin's finalizer removed, its children
    /// left in place). Unset: every parent of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_selector: Option<LabelSelector>,
    /// Only parents in these namespaces are reconciled; the others are not written to at all,
    /// as with `parentSelector`. `reconhost plugin install --rbac` sets it to the namespaces it
    /// bound the plugin's grant in, so that the plugin is called only for parents it may act on.
    /// It does not filter a cluster-scoped parent kind (its grant still bounds where its
    /// children go). Unset: every namespace (the host's `--namespace` still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 256),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub namespaces: Option<Vec<String>>,
    /// How a new digest reaches the parents: at once (default), or progressively with shadow
    /// comparison, growing shares, analysis and automatic rollback. A change of only the config
    /// or the limits always applies at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// How often every parent is reconciled again though nothing changed (Go duration, e.g.
    /// `10m`), as Metacontroller's `resyncPeriodSeconds` and controller-runtime's `SyncPeriod`:
    /// for plugins whose answer depends on more than the host watches (time, another system).
    /// `0s` never; 1 s to 24 h otherwise. Unset: the host's `--sync-period`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) == duration('0s') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))").message("resyncPeriod must be 0s (never) or between 1s and 24h"))]
    pub resync_period: Option<Duration>,
    /// Not woken when nothing but a parent's status changed (its own status writes included),
    /// as controller-runtime's `GenerationChangedPredicate` but keeping metadata changes
    /// (labels, annotations, a deletion): for plugins that compute everything from the spec.
    /// Default false: any change wakes the plugin.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_parent_status_changes: bool,
    /// Objects without a controller that the plugin asks for as children (same kind, namespace
    /// and name) and whose labels match are adopted: the host's apply makes the parent their
    /// controller and the plugin's fields theirs. The operator's consent, given here, since
    /// taking over an object is what the host otherwise refuses. An object another controller
    /// owns is never adopted. `{}` matches every orphan. Unset (default): none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt_orphans: Option<LabelSelector>,
    /// Makes the plugin a decorator (Metacontroller's DecoratorController): it attaches
    /// children to objects it does not own, and several decorators (and the kind's own plugin)
    /// may serve one kind. The host writes no status, condition or `observedGeneration` to the
    /// objects, puts its finalizer only on those the plugin gives children, and removes those
    /// children and the finalizer from an object that leaves the selection. Its
    /// ReconcilePlugin may have any name. Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decorator: Option<Decorator>,
}

/// How a decorator picks the objects it decorates, beyond `parentSelector`'s labels.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Decorator {
    /// Only objects whose annotations match are decorated: `matchAnnotations` and
    /// `matchExpressions` as a label selector's (values as label values). Unset: every
    /// object `parentSelector` selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
}

/// A selector over annotations, shaped as Metacontroller's.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations that must be present with these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_annotations: Option<std::collections::BTreeMap<String, String>>,
    /// Requirements on annotations (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions:
        Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>>,
}

impl AnnotationSelector {
    /// The same requirements as a label selector, to evaluate over annotations.
    pub fn as_label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: self.match_annotations.clone(),
            match_expressions: self.match_expressions.clone(),
        }
    }
}

/// One ReconcilePlugin per parent kind: the name is the kind in lower case, a dot and the group
/// (for the core group, the kind alone), so the API server itself refuses a second one. A
/// decorator's name is free: several may decorate one kind.
const NAME_RULE: &str = "has(self.spec.decorator) || self.metadata.name == self.spec.parent.kind.lowerAscii() + (self.spec.parent.apiVersion.contains('/') ? '.' + self.spec.parent.apiVersion.split('/')[0] : '')";
const NAME_MESSAGE: &str = "metadata.name must be the parent kind in lower case, a dot and its API group (for example webapp.examples.reconhost.dev): there is one ReconcilePlugin per parent kind (a decorator's name is free)";

/// The name a ReconcilePlugin for `parent` must have.
pub fn plugin_resource_name(parent: &KindRef) -> String {
    let kind = parent.kind.to_ascii_lowercase();
    match parent.group() {
        "" => kind,
        group => format!("{kind}.{group}"),
    }
}

/// A kind: apiVersion and kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// `group/version` (e.g. `examples.reconhost.dev/v1alpha1`).
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// The kind (e.g. `WebApp`).
    #[schemars(regex(pattern = r"^[A-Z][A-Za-z0-9]{0,62}$"))]
    pub kind: String,
}

impl From<&ParentRef> for KindRef {
    fn from(parent: &ParentRef) -> Self {
        KindRef::new(&parent.api_version, &parent.kind)
    }
}

/// Where a component comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.configMap), has(self.oci)].exists_one(x, x)")
        .message("exactly one of source.configMap and source.oci must be set")
)]
pub struct Source {
    /// sha256 of the component's bytes (`sha256:<64 hex digits>`), verified before anything is
    /// compiled. For OCI it is the digest of the wasm layer.
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: String,
    /// A key of a ConfigMap's binaryData. Up to 1 MiB (the ConfigMap limit), gzip allowed; use
    /// an OCI registry for larger components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// An OCI artifact whose single wasm layer is the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
}

/// A component in a ConfigMap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// The ConfigMap's namespace (the plugin's namespace).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in `binaryData`.
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// How the bytes under the key are compressed.
    #[serde(default)]
    pub compression: Compression,
}

fn default_key() -> String {
    "plugin.wasm".to_owned()
}

/// Compression of a ConfigMap source.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The raw component.
    #[default]
    None,
    /// gzip (RFC 1952), decompressed by the host up to its size limit.
    Gzip,
}

/// A component in an OCI registry.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// The artifact, `registry/repository:tag` or `registry/repository@sha256:...`. The tag
    /// only says where to look: the layer whose digest is `source.digest` is what is used.
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in the plugin's namespace with credentials for
    /// the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_ref: Option<LocalObjectRef>,
    /// Public keys (PEM, as `cosign generate-key-pair` writes `cosign.pub`): when set, the
    /// artifact's manifest must carry a cosign signature that one of them verifies, or the
    /// plugin is not fetched (`Fetched=False`, reason `SignatureNotVerified`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8), inner(length(min = 1, max = 4096)))]
    pub public_keys: Option<Vec<String>>,
}

/// A namespaced object in the plugin's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LocalObjectRef {
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A ServiceAccount.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountRef {
    /// Its namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Limits of every call of the plugin.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimits {
    /// Deadline of one call (Go duration, e.g. `2s`), 10 ms to 60 s. Default 2 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('10ms') && duration(self) <= duration('60s')").message("callTimeout must be between 10ms and 60s"))]
    pub call_timeout: Option<Duration>,
    /// Memory cap of one instance (a quantity, e.g. `64Mi`), 1Mi to 1Gi. Default 64Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).compareTo(quantity('1Mi')) >= 0 && quantity(self).compareTo(quantity('1Gi')) <= 0").message("memory must be a quantity between 1Mi and 1Gi"))]
    pub memory: Option<String>,
    /// Largest response of one call (a quantity), 1Ki to 64Mi. Default 4Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).compareTo(quantity('1Ki')) >= 0 && quantity(self).compareTo(quantity('64Mi')) <= 0").message("responseBytes must be a quantity between 1Ki and 64Mi"))]
    pub response_bytes: Option<String>,
    /// Most children one parent may have, 1 to 10000. Default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub children: Option<u32>,
    /// How long a deleted parent waits for the plugin's cleanup before the host removes its
    /// finalizer anyway (Go duration), 1 s to 24 h. Default 10 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('24h')").message("finalizeTimeout must be between 1s and 24h"))]
    pub finalize_timeout: Option<Duration>,
    /// Parents reconciled at once, 1 to 64. Default: the host's `--max-concurrent-reconciles`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub concurrent_reconciles: Option<u16>,
}

/// What the host observed and did.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilePluginStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The digest of the code serving now. A failed upgrade leaves it at the old digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_digest: Option<String>,
    /// The plugin's own name and version, from its `info()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginIdentity>,
    /// The contract the component was built against, e.g. `reconhost:plugin@0.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// What the plugin declared it touches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<Declared>,
    /// What the plugin's ServiceAccount may not do of what the plugin needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// `Fetched`, `Compiled`, `Authorized`, `Ready` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// How the plugin's parents stand, as their `Synced` conditions say: the health of the
    /// plugin as its parents see it. Absent for a decorator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parents: Option<ParentCounts>,
    /// Where a progressive rollout stands (the last one, once it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The revisions serving now: the stable one, and a rollout's candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionStatus>,
    /// The revisions that served every parent, newest (the active one) first, up to
    /// `spec.rollout.revisionHistoryLimit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

/// A plugin's parents, counted.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct ParentCounts {
    /// Parents its selection admits (`spec.parentSelector`, its namespaces).
    pub served: u32,
    /// Of those, `Synced=True` at their current generation.
    pub synced: u32,
    /// Of those, `Synced=False` for a failure (not waiting on a wave, not paused).
    pub failing: u32,
    /// Of those, shown as paused while the plugin is suspended.
    pub paused: u32,
}

/// The permissions a plugin needs and its ServiceAccount lacks.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Authorization {
    /// Each denied permission, e.g. `list secrets in all namespaces`.
    #[serde(default)]
    pub denied: Vec<String>,
}

/// A plugin's name and version.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PluginIdentity {
    /// Name (a DNS label): its field manager is `reconhost/<name>`, its finalizer
    /// `reconhost.dev/<name>`.
    pub name: String,
    /// Version, as the plugin states it.
    pub version: String,
}

/// The kinds a plugin declared.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Declared {
    /// Child kinds, `apiVersion/kind`.
    #[serde(default)]
    pub children: Vec<String>,
    /// Kinds it reads, `apiVersion/kind`.
    #[serde(default)]
    pub reads: Vec<String>,
    /// Whether it keeps a finalizer on parents.
    #[serde(default)]
    pub finalizer: bool,
}

/// The number of bytes a Kubernetes quantity stands for (`64Mi`, `1G`, `512`, `1.5Ki`), or
/// `None` if it is not a quantity. Fractions of a byte are rounded up.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return None,
    };
    let number: f64 = number.parse().ok()?;
    let bytes = (number * factor).ceil();
    (bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64).then_some(bytes as u64)
}

fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The CustomResourceDefinition as YAML, as checked in under deploy/crds/.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt as _;
    let header = "# Generated from host/src/api.rs by `make crds`; do not edit.\n";
    let body =
        serde_saphyr::to_string(&ReconcilePlugin::crd()).expect("a CRD always serializes to YAML");
    format!("{header}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_crds_should_match_the_types() {
        let plain = include_str!("../../deploy/crds/reconcileplugins.reconhost.dev.yaml");
        assert!(
            plain == crd_yaml(),
            "deploy/crds/reconcileplugins.reconhost.dev.yaml is out of date: run `make crds`"
        );
        let chart =
            include_str!("../../deploy/charts/reconhost/crds/reconcileplugins.reconhost.dev.yaml");
        assert!(
            chart == crd_yaml(),
            "the chart's crds/ is out of date: run `make crds`"
        );
    }

    #[test]
    fn quantities_should_parse_to_bytes() {
        assert_eq!(parse_quantity("64Mi"), Some(64 << 20));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("4M"), Some(4_000_000));
        assert_eq!(parse_quantity("1.5Ki"), Some(1536));
        assert_eq!(parse_quantity("512"), Some(512));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity("5Xi"), None);
    }

    #[test]
    fn resource_name_should_be_kind_dot_group() {
        assert_eq!(
            plugin_resource_name(&KindRef::new("examples.reconhost.dev/v1alpha1", "WebApp")),
            "webapp.examples.reconhost.dev"
        );
        assert_eq!(
            plugin_resource_name(&KindRef::new("v1", "ConfigMap")),
            "configmap"
        );
    }

    #[test]
    fn spec_should_read_the_documented_shape() {
        let spec: ReconcilePluginSpec = serde_json::from_value(serde_json::json!({
            "parent": {"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "WebApp"},
            "source": {"digest": format!("sha256:{}", "a".repeat(64)),
                       "configMap": {"namespace": "plugins", "name": "webapp"}},
            "serviceAccountRef": {"namespace": "plugins", "name": "webapp"},
            "limits": {"callTimeout": "500ms", "memory": "32Mi", "concurrentReconciles": 2},
            "config": {"replicas": 3},
        }))
        .expect("the example spec parses");
        let cm = spec.source.config_map.expect("a ConfigMap source");
        assert_eq!(
            (cm.key.as_str(), cm.compression),
            ("plugin.wasm", Compression::None)
        );
        let limits = spec.limits.expect("limits");
        assert_eq!(
            std::time::Duration::from(limits.call_timeout.expect("a timeout")),
            std::time::Duration::from_millis(500)
        );
        assert!(!spec.suspend);
    }
}
