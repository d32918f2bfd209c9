//! An install that narrows a ReconcilePlugin's `spec.namespaces` leaves its parents in the
//! namespaces it drops: the host no longer reconciles them, and (its share of the plugin's RBAC
//! bound only where the plugin works) no longer sees them, so nothing would take the plugin's
//! finalizer off them, and deleting one (or its namespace) would hang. The installer releases
//! them, as the host does for every parent on `plugin uninstall`: after the host has seen the
//! narrower spec, so it does not put the finalizer back, and before the grants there go.
//! Cluster-scoped parents are not confined by `spec.namespaces`, so none of them is released.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::Api;

use crate::api::ReconcilePlugin;
use crate::lifecycle::uninstall::release_outside;
use crate::model::KindRef;

/// How long to wait for the host to take in the narrower spec before releasing anyway.
/// A running host takes a spec change in within a second.
const HOST_CATCH_UP: Duration = Duration::from_secs(10);

/// Where parents may be left behind when `spec.namespaces` goes from `before` to `after`:
/// `None` when nowhere; else the namespaces to look in (`None`: every one) and those to skip.
pub(super) fn dropped(
    before: Option<&[String]>,
    after: Option<&[String]>,
) -> Option<(Vec<Option<String>>, Vec<String>)> {
    let after = after?;
    match before {
        None => Some((vec![None], after.to_vec())),
        Some(before) => {
            let gone: Vec<Option<String>> = before
                .iter()
                .filter(|n| !after.contains(n))
                .map(|n| Some(n.clone()))
                .collect();
            (!gone.is_empty()).then_some((gone, Vec::new()))
        }
    }
}

/// Releases the parents `rp` no longer reconciles after narrowing from `before`; a line to
/// print, when there was anything to do.
pub(super) async fn release_dropped(
    client: &kube::Client,
    rp: &str,
    parent: &KindRef,
    finalizer: &str,
    before: Option<&[String]>,
    after: Option<&[String]>,
) -> anyhow::Result<Option<String>> {
    let Some((look_in, skip)) = dropped(before, after) else {
        return Ok(None);
    };
    let caught_up = host_caught_up(client, rp).await;
    let released = release_outside(client, parent, finalizer, &look_in, &skip)
        .await
        .with_context(|| {
            format!("releasing the parents ReconcilePlugin {rp} no longer reconciles")
        })?;
    let note = if caught_up {
        String::new()
    } else {
        format!(
            " (the host had not taken in the new spec within {} s: if it puts the finalizer back, run this install again)",
            HOST_CATCH_UP.as_secs()
        )
    };
    Ok(Some(format!(
        "released {released} parent(s) outside the plugin's namespaces{note}"
    )))
}

/// Waits until the host says it has taken in the ReconcilePlugin's spec (its
/// `status.observedGeneration`); whether it did in time.
async fn host_caught_up(client: &kube::Client, rp: &str) -> bool {
    let api: Api<ReconcilePlugin> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + HOST_CATCH_UP;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(rp)) = api.get_opt(rp).await {
            let generation = rp.metadata.generation.unwrap_or_default();
            let observed = rp
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or_default();
            if observed >= generation {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn only_namespaces_taken_away_should_be_released() {
        let (a, ab) = (list(&["a"]), list(&["a", "b"]));
        assert_eq!(
            dropped(Some(&ab), Some(&a)),
            Some((vec![Some("b".to_owned())], Vec::new()))
        );
        assert_eq!(dropped(Some(&a), Some(&ab)), None, "widened");
        assert_eq!(dropped(Some(&a), Some(&a)), None, "unchanged");
        assert_eq!(
            dropped(None, Some(&a)),
            Some((vec![None], a.clone())),
            "from every namespace to one: everywhere but there"
        );
        assert_eq!(dropped(Some(&a), None), None, "widened to every namespace");
    }
}
