//! Events on ReconcilePlugins, what `kubectl describe rp` lists under the conditions: one for
//! each change of what serves and of the `Ready`, `Authorized` and `Degraded` conditions, so a
//! team sees when its plugin started serving, was upgraded, failed, lost a permission, or
//! began failing its parents.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType};

use crate::api::ReconcilePluginStatus;

/// events.k8s.io refuses notes of 1 KiB or more.
const MAX_NOTE: usize = 1000;

/// The events that going from `old` to `new` deserves, in order.
pub fn transitions(old: Option<&ReconcilePluginStatus>, new: &ReconcilePluginStatus) -> Vec<Event> {
    let mut events = Vec::new();
    let old_digest = old.and_then(|s| s.active_digest.as_deref());
    let serving = new
        .plugin
        .as_ref()
        .map_or_else(String::new, |p| format!("plugin {} {}", p.name, p.version));
    let served = match (old_digest, new.active_digest.as_deref()) {
        (None, Some(digest)) => Some(event(
            EventType::Normal,
            "Installed",
            format!("{serving} serves ({digest})"),
        )),
        (Some(from), Some(to)) if from != to => Some(event(
            EventType::Normal,
            "Upgraded",
            format!("{serving} serves {to}, replacing {from}"),
        )),
        _ => None,
    };
    let installed = served.is_some();
    events.extend(served);
    for type_ in ["Ready", "Authorized"] {
        let before = old.and_then(|s| condition(s, type_));
        let Some(after) = condition(new, type_) else {
            continue;
        };
        if before.is_some_and(|b| b.status == after.status && b.reason == after.reason) {
            continue;
        }
        // Serving is said once: by Installed or Upgraded when the digest changed.
        if type_ == "Ready" && after.status == "True" && installed {
            continue;
        }
        // A first look that finds nothing wrong is no news.
        if before.is_none() && after.status == "True" && type_ == "Authorized" {
            continue;
        }
        let kind = match (after.status.as_str(), after.reason.as_str()) {
            ("True", _) | (_, "Suspended" | "Loading") => EventType::Normal,
            _ => EventType::Warning,
        };
        events.push(event(kind, &after.reason, after.message.clone()));
    }
    // Too many parents failing, and the end of it; a first look that finds them healthy is no
    // news, and neither is a change of counts that keeps the status.
    let before = old.and_then(|s| condition(s, super::parents::DEGRADED));
    if let Some(after) = condition(new, super::parents::DEGRADED)
        && before.map_or(after.status == "True", |b| b.status != after.status)
    {
        let kind = if after.status == "True" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        events.push(event(kind, &after.reason, after.message.clone()));
    }
    events
}

/// The event of an uninstall that released `parents` parents.
pub fn uninstalled(parents: usize) -> Event {
    event(
        EventType::Normal,
        "Uninstalled",
        format!("the plugin stopped; its finalizer came off {parents} parent(s)"),
    )
}

fn condition<'a>(status: &'a ReconcilePluginStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// An event with `note` cut to what the API server takes.
pub(super) fn event(type_: EventType, reason: &str, mut note: String) -> Event {
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PluginIdentity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn status(digest: Option<&str>, conditions: &[(&str, &str, &str)]) -> ReconcilePluginStatus {
        ReconcilePluginStatus {
            active_digest: digest.map(str::to_owned),
            plugin: Some(PluginIdentity {
                name: "webapp".into(),
                version: "1.2.0".into(),
            }),
            conditions: conditions
                .iter()
                .map(|(type_, status, reason)| Condition {
                    type_: (*type_).into(),
                    status: (*status).into(),
                    reason: (*reason).into(),
                    message: format!("{type_} is {status}"),
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .collect(),
            ..ReconcilePluginStatus::default()
        }
    }

    fn reasons(events: &[Event]) -> Vec<(&str, bool)> {
        events
            .iter()
            .map(|e| (e.reason.as_str(), e.type_ == EventType::Warning))
            .collect()
    }

    #[test]
    fn first_serve_should_be_one_installed_event() {
        let new = status(
            Some("sha256:aa"),
            &[
                ("Ready", "True", "Running"),
                ("Authorized", "True", "Authorized"),
            ],
        );
        let events = transitions(None, &new);
        assert_eq!(reasons(&events), [("Installed", false)]);
        assert!(events[0].note.as_deref().unwrap().contains("webapp 1.2.0"));
    }

    #[test]
    fn upgrade_failure_and_denial_should_each_be_said_once() {
        let v1 = status(Some("sha256:aa"), &[("Ready", "True", "Running")]);
        let v2 = status(Some("sha256:bb"), &[("Ready", "True", "Running")]);
        let upgraded = transitions(Some(&v1), &v2);
        assert_eq!(reasons(&upgraded), [("Upgraded", false)]);
        assert!(
            upgraded[0]
                .note
                .as_deref()
                .unwrap()
                .contains("replacing sha256:aa")
        );

        let failed = status(
            Some("sha256:bb"),
            &[
                ("Ready", "False", "UpgradeFailed"),
                ("Authorized", "False", "Denied"),
            ],
        );
        assert_eq!(
            reasons(&transitions(Some(&v2), &failed)),
            [("UpgradeFailed", true), ("Denied", true)]
        );
        assert!(
            transitions(Some(&failed), &failed).is_empty(),
            "an unchanged status must not repeat its events"
        );
        let healed = status(
            Some("sha256:bb"),
            &[
                ("Ready", "True", "Running"),
                ("Authorized", "True", "Authorized"),
            ],
        );
        assert_eq!(
            reasons(&transitions(Some(&failed), &healed)),
            [("Running", false), ("Authorized", false)]
        );
    }

    #[test]
    fn degraded_should_be_said_when_it_starts_and_ends() {
        let healthy = status(None, &[("Degraded", "False", "ParentsHealthy")]);
        let failing = status(None, &[("Degraded", "True", "ParentsFailing")]);
        let said = |old: Option<&ReconcilePluginStatus>, new| {
            transitions(old, new)
                .into_iter()
                .map(|e| (e.type_, e.reason))
                .collect::<Vec<_>>()
        };
        assert_eq!(said(None, &healthy), []);
        assert_eq!(said(Some(&healthy), &healthy), []);
        assert_eq!(
            said(Some(&healthy), &failing),
            [(EventType::Warning, "ParentsFailing".to_owned())]
        );
        assert_eq!(said(Some(&failing), &failing), []);
        assert_eq!(
            said(Some(&failing), &healthy),
            [(EventType::Normal, "ParentsHealthy".to_owned())]
        );
    }

    #[test]
    fn long_messages_should_fit_an_event_note() {
        let mut new = status(None, &[("Ready", "False", "CompileFailed")]);
        new.conditions[0].message = "é".repeat(4000);
        let events = transitions(None, &new);
        let note = events[0].note.as_deref().unwrap();
        assert!(note.len() <= MAX_NOTE && note.ends_with("..."));
        assert!(events[0].type_ == EventType::Warning);
    }
}
