//! Why a plugin does not run, as the conditions of its ReconcilePlugin say it: the stage that
//! failed, a CamelCase reason, and a message that says what to do.

use crate::cache::DiscoveryError;
use crate::controller::PrepareError;
use crate::controller::same_kind;
use crate::model::KindRef;
use crate::runtime::LoadError;
use crate::source::SourceError;
use crate::supervisor::SupervisorError;

/// The reason of a `Compiled=False` condition for a component over the compile budget.
pub const COMPILE_BUDGET_EXCEEDED: &str = "CompileBudgetExceeded";

/// The stage of loading a plugin that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before loading: the ServiceAccount it would act as does not exist.
    Account,
    /// Fetching or verifying the component (`Fetched=False`).
    Fetch,
    /// Compiling or describing it (`Compiled=False`).
    Compile,
    /// Starting it: kinds, conflicts, caches (`Ready=False`).
    Start,
}

/// Why a plugin does not run (or its new version does not): the condition, its reason and a
/// message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Where it failed.
    pub stage: Stage,
    /// The condition reason, CamelCase.
    pub reason: &'static str,
    /// What happened.
    pub message: String,
    /// Waiting for what someone else adds to the cluster (a CRD, a grant to the host): looked
    /// at again every 10 s rather than with a growing backoff.
    pub waits_on_cluster: bool,
}

impl Failure {
    pub(super) fn new(stage: Stage, reason: &'static str, message: String) -> Self {
        Self {
            stage,
            reason,
            message,
            waits_on_cluster: false,
        }
    }

    /// A source that could not deliver.
    pub fn source(error: &SourceError) -> Self {
        Self {
            // A signature is pushed beside the artifact, often after it: looked for every 10 s.
            waits_on_cluster: matches!(error, SourceError::Unverified { .. }),
            ..Self::new(Stage::Fetch, error.reason(), error.to_string())
        }
    }

    /// A component that does not load.
    pub fn load(error: &LoadError) -> Self {
        let reason = match error {
            LoadError::Read { .. } => {
                return Self::new(Stage::Fetch, "SourceNotFound", error.to_string());
            }
            LoadError::Compile { .. } => "CompileFailed",
            LoadError::UnsupportedContract { .. } => "UnsupportedContract",
            LoadError::NotAReconciler { .. } => "NotAReconciler",
            LoadError::Info { .. } => "InfoFailed",
            LoadError::InvalidInfo { .. } => "InvalidInfo",
            LoadError::Cache { .. } => "CacheFailed",
            LoadError::OverBudget { .. } => {
                return Self::new(
                    Stage::Compile,
                    COMPILE_BUDGET_EXCEEDED,
                    format!(
                        "{error}; the host does not compile this digest again under this budget (push another build, or raise the host's --max-compile-* flags)"
                    ),
                );
            }
        };
        Self::new(Stage::Compile, reason, error.to_string())
    }

    /// The ServiceAccount does not exist.
    pub fn no_account(account: &str) -> Self {
        Self::new(
            Stage::Account,
            "ServiceAccountNotFound",
            format!(
                "ServiceAccount {account} does not exist; the plugin acts as it and runs once it does (create it and its RBAC: reconhost plugin rbac)"
            ),
        )
    }

    /// The host may not act as the ServiceAccount (or read it).
    pub fn cannot_impersonate(account: &str) -> Self {
        Self::new(
            Stage::Account,
            "CannotImpersonate",
            format!(
                "the host may not act as ServiceAccount {account}: it impersonates only ServiceAccounts in the plugin namespaces its installation grants (the chart's pluginNamespaces); use a ServiceAccount there, or add its namespace"
            ),
        )
    }

    /// A failure of the host itself.
    pub fn host(message: String) -> Self {
        Self::new(Stage::Start, "HostError", message)
    }

    pub(super) fn supervisor(error: &SupervisorError, parent: &KindRef) -> Self {
        let reason = match error {
            SupervisorError::KindTaken { .. } | SupervisorError::NameTaken { .. } => "Conflict",
            SupervisorError::NameChanged { .. }
            | SupervisorError::ParentChanged { .. }
            | SupervisorError::RoleChanged => "UpgradeFailed",
            SupervisorError::Prepare(PrepareError::Discovery(d)) => {
                return Self::discovery(d, parent);
            }
            SupervisorError::Prepare(PrepareError::ClusterScopedChild { .. }) => {
                "ClusterScopedChild"
            }
            SupervisorError::Prepare(PrepareError::BuiltinParent { .. }) => "BuiltinParent",
            SupervisorError::Prepare(PrepareError::Lookup { .. }) => "DiscoveryFailed",
            SupervisorError::Cycle { .. } => "Cycle",
            SupervisorError::NotSynced { .. } => "CachesNotSynced",
            SupervisorError::HostForbidden { .. } => {
                return Self {
                    waits_on_cluster: true,
                    ..Self::new(Stage::Start, "HostForbidden", error.to_string())
                };
            }
        };
        Self::new(Stage::Start, reason, error.to_string())
    }

    fn discovery(error: &DiscoveryError, parent: &KindRef) -> Self {
        let (reason, message) = if !error.is_not_found() {
            ("DiscoveryFailed", error.to_string())
        } else if same_kind(&error.kind, parent) {
            (
                "ParentKindNotFound",
                format!(
                    "the API server does not serve the parent kind {} (is its CRD installed?); the plugin starts once it does",
                    error.kind
                ),
            )
        } else {
            (
                "KindNotFound",
                format!(
                    "the API server does not serve {}, which the plugin declares (is its CRD installed?); the plugin starts once it does",
                    error.kind
                ),
            )
        };
        Self {
            waits_on_cluster: error.is_not_found(),
            ..Self::new(Stage::Start, reason, message)
        }
    }
}
