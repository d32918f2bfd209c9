//! A ReconcilePlugin's status: what serves, what it declared, and the conditions `Fetched`,
//! `Compiled` and `Ready`, which describe the spec's digest (the latest attempt) while
//! `activeDigest` says what actually serves. A failed upgrade therefore shows the new digest's
//! failure on `Fetched` or `Compiled`, `Ready=False` with reason `UpgradeFailed` naming the
//! cause, and the old digest still in `activeDigest`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::failure::COMPILE_BUDGET_EXCEEDED;
use super::load::Obtained;
use super::{Failure, Stage};
use crate::api::{Authorization, Declared, PluginIdentity, ReconcilePlugin, ReconcilePluginStatus};
use crate::identity::access::Question;
use crate::runtime::{CompileBudget, Plugin};

/// What is known of the plugin's authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorized {
    /// Not checked (nothing runs yet).
    Unknown,
    /// It cannot act as its ServiceAccount: the account does not exist, or the host may not
    /// impersonate it.
    NoAccount {
        /// `ServiceAccountNotFound` or `CannotImpersonate`.
        reason: &'static str,
        /// Why, and what to do.
        message: String,
    },
    /// Checked: what of what it needs is denied (empty: nothing).
    Denied(Vec<Question>),
}

/// The status the host wants on `rp` (`object` is its cached JSON, for the conditions'
/// transition times), given what serves and how the latest attempt ended.
pub fn compose(
    rp: &ReconcilePlugin,
    object: &Value,
    serving: Option<&(Plugin, Obtained)>,
    failure: Option<&Failure>,
    authorized: &Authorized,
) -> ReconcilePluginStatus {
    let generation = object["metadata"]["generation"].as_i64();
    let cached = serving.is_some_and(|(_, o)| *o == Obtained::Cached);
    let condition = |type_: &str, status: &str, reason: &str, message: String| {
        (
            type_.to_owned(),
            status.to_owned(),
            reason.to_owned(),
            message,
        )
    };
    let fetched_ok = if failure.is_none() && cached {
        condition(
            "Fetched",
            "True",
            "Cached",
            "the pinned digest is in the compiled-code cache; nothing was fetched".into(),
        )
    } else {
        condition(
            "Fetched",
            "True",
            "Fetched",
            format!("the component matches {}", rp.spec.source.digest),
        )
    };
    let compiled_ok = if failure.is_none() && cached {
        condition(
            "Compiled",
            "True",
            "Cached",
            "loaded from the compiled-code cache".into(),
        )
    } else {
        condition(
            "Compiled",
            "True",
            "Compiled",
            "the component loaded".into(),
        )
    };
    let mut conditions = match failure.map(|f| f.stage) {
        None => vec![fetched_ok, compiled_ok],
        Some(Stage::Account) if serving.is_some() => vec![fetched_ok, compiled_ok],
        Some(Stage::Account) => vec![
            condition(
                "Fetched",
                "Unknown",
                "NotFetched",
                "waiting for the ServiceAccount".into(),
            ),
            condition(
                "Compiled",
                "Unknown",
                "NotFetched",
                "waiting for the ServiceAccount".into(),
            ),
        ],
        Some(Stage::Fetch) => {
            let f = failure.expect("matched");
            vec![
                condition("Fetched", "False", f.reason, f.message.clone()),
                condition(
                    "Compiled",
                    "Unknown",
                    "NotFetched",
                    "waiting for the component".into(),
                ),
            ]
        }
        Some(Stage::Compile) => {
            let f = failure.expect("matched");
            vec![
                fetched_ok,
                condition("Compiled", "False", f.reason, f.message.clone()),
            ]
        }
        Some(Stage::Start) => vec![fetched_ok, compiled_ok],
    };
    let account = format!(
        "{}/{}",
        rp.spec.service_account_ref.namespace, rp.spec.service_account_ref.name
    );
    match authorized {
        Authorized::Unknown => {}
        Authorized::NoAccount { reason, message } => conditions.push(condition(
            "Authorized",
            "False",
            reason,
            message.clone(),
        )),
        Authorized::Denied(denied) if denied.is_empty() => conditions.push(condition(
            "Authorized",
            "True",
            "Authorized",
            format!(
                "ServiceAccount {account} may do everything the plugin declares; its writes are judged by RBAC as they are made, and a read right revoked by changing its Roles or bindings stops at the plugin's next reconcile; if the host may not watch RBAC, it keeps working for up to {} min (the host trusts an allowed answer that long, as kube-apiserver's webhook authorizer does)",
                crate::identity::access::ALLOWED_TTL.as_secs() / 60
            ),
        )),
        Authorized::Denied(denied) => {
            let list: Vec<String> = denied.iter().map(ToString::to_string).collect();
            conditions.push(condition(
                "Authorized",
                "False",
                "Denied",
                format!(
                    "ServiceAccount {account} may not {}; what the plugin needs: reconhost plugin rbac",
                    list.join(", ")
                ),
            ));
        }
    }
    let ready = match (failure, serving) {
        // The old code does not keep serving without its identity: it is suspended.
        (Some(f), Some(_)) if f.stage == Stage::Account => {
            condition("Ready", "False", f.reason, f.message.clone())
        }
        (Some(f), Some((plugin, _))) => condition(
            "Ready",
            "False",
            "UpgradeFailed",
            format!(
                "{} ({}); sha256:{} keeps serving",
                f.message,
                f.reason,
                plugin.digest()
            ),
        ),
        (Some(f), None) => condition("Ready", "False", f.reason, f.message.clone()),
        (None, Some(_)) if rp.spec.suspend => condition(
            "Ready",
            "False",
            "Suspended",
            "spec.suspend is set: no reconciles start; changes queue until it is cleared".into(),
        ),
        (None, Some((plugin, _))) => condition(
            "Ready",
            "True",
            "Running",
            format!(
                "plugin {} {} reconciles {}",
                plugin.info().name,
                plugin.info().version,
                plugin.info().parent
            ),
        ),
        (None, None) => condition("Ready", "Unknown", "Loading", "loading the plugin".into()),
    };
    conditions.push(ready);

    let current = object["status"]["conditions"].as_array();
    let conditions = conditions
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let previous = current.and_then(|c| c.iter().find(|c| c["type"] == type_.as_str()));
            let since = previous
                .filter(|p| p["status"] == status.as_str())
                .and_then(|p| p["lastTransitionTime"].as_str())
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            Condition {
                last_transition_time: Time(since.unwrap_or_else(|| {
                    let now = jiff::Timestamp::now();
                    now.round(jiff::Unit::Second).unwrap_or(now)
                })),
                message,
                observed_generation: generation,
                reason,
                status,
                type_,
            }
        })
        .collect();

    let plugin = serving.map(|(p, _)| p);
    let previous: Option<ReconcilePluginStatus> = object
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    ReconcilePluginStatus {
        observed_generation: generation,
        active_digest: plugin.map(|p| format!("sha256:{}", p.digest())),
        plugin: plugin
            .map(|p| PluginIdentity {
                name: p.info().name.clone(),
                version: p.info().version.clone(),
            })
            // Kept when nothing serves: an uninstall needs the name to find the finalizers the
            // plugin left before a restart.
            .or_else(|| previous.as_ref().and_then(|s| s.plugin.clone())),
        contract: plugin.map(|p| p.contract().to_owned()),
        authorization: match authorized {
            Authorized::Denied(denied) if !denied.is_empty() => Some(Authorization {
                denied: denied.iter().map(ToString::to_string).collect(),
            }),
            _ => None,
        },
        declared: plugin.map(|p| Declared {
            children: p.info().children.iter().map(ToString::to_string).collect(),
            reads: p.info().reads.iter().map(ToString::to_string).collect(),
            finalizer: p.info().finalizer,
        }),
        conditions,
        // The lifecycle adds the parents' standing (`parents::with_parents`).
        parents: None,
        // The lifecycle adds the rollout's part (`Lifecycle::with_rollout`).
        rollout: None,
        revisions: Vec::new(),
        history: Vec::new(),
    }
}

/// The failure recorded on `rp` for compiling the component with sha256 `digest` over
/// `budget`, if its status holds one: `Compiled=False` with reason `CompileBudgetExceeded`,
/// naming that digest and that same budget. Returned as it was recorded, so the status the
/// host writes again is the one it read.
pub fn over_budget(rp: &ReconcilePlugin, digest: &str, budget: &CompileBudget) -> Option<Failure> {
    let bounds = budget.describe();
    rp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| {
            c.type_ == "Compiled"
                && c.status == "False"
                && c.reason == COMPILE_BUDGET_EXCEEDED
                && c.message.contains(&format!("(sha256 {digest})"))
                && c.message.contains(&bounds)
        })
        .map(|c| Failure::new(Stage::Compile, COMPILE_BUDGET_EXCEEDED, c.message.clone()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A ReconcilePlugin whose status holds one `Compiled=False` condition.
    fn with_compiled_failure(reason: &str, message: &str) -> ReconcilePlugin {
        serde_json::from_value(json!({
            "apiVersion": "reconhost.dev/v1alpha1", "kind": "ReconcilePlugin",
            "metadata": {"name": "stamp.test.reconhost.dev"},
            "spec": {
                "parent": {"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp"},
                "source": {"digest": "sha256:abc", "configMap": {"namespace": "p", "name": "c"}},
                "serviceAccountRef": {"namespace": "p", "name": "sa"},
            },
            "status": {"conditions": [{
                "type": "Compiled", "status": "False", "reason": reason, "message": message,
                "lastTransitionTime": "2026-12-05T00:00:00Z",
            }]},
        }))
        .expect("a ReconcilePlugin")
    }

    #[test]
    fn a_failure_over_the_same_budget_for_the_same_digest_should_be_returned_as_recorded() {
        let budget = CompileBudget::default();
        let message = format!(
            "compiling plugin x (sha256 abc) was stopped: compiling needed more than 768 MiB ({})",
            budget.describe()
        );
        let rp = with_compiled_failure(COMPILE_BUDGET_EXCEEDED, &message);
        let failure = over_budget(&rp, "abc", &budget).expect("the recorded failure");
        assert_eq!(
            failure.message, message,
            "the same words, so nothing is rewritten"
        );
        assert_eq!(failure.stage, Stage::Compile);

        assert!(
            over_budget(&rp, "def", &budget).is_none(),
            "another digest compiles"
        );
        let larger = CompileBudget {
            memory: 2 << 30,
            ..CompileBudget::default()
        };
        assert!(
            over_budget(&rp, "abc", &larger).is_none(),
            "a larger budget tries again"
        );
        let other = with_compiled_failure("CompileFailed", &message);
        assert!(
            over_budget(&other, "abc", &budget).is_none(),
            "only budget failures"
        );
    }
}
