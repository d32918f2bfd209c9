//! `reconhost plugin rollout status | promote | abort | undo`: a person's view of a progressive
//! rollout and their hand on it. Promote and abort annotate the ReconcilePlugin with the
//! candidate's digest (`reconhost.dev/rollout-promote`, `reconhost.dev/rollout-abort`), which
//! the host acts on at its next look; naming the digest makes the request about that candidate
//! only, so a stale annotation never touches a later one. Undo sets `spec.source` to the
//! revision before the active one and promotes it at once.

use anyhow::{Context as _, bail};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::api::ReconcilePlugin;
use crate::cli::{RolloutArgs, RolloutCommand};

/// The annotations the host reads (see `lifecycle::progress`).
const PROMOTE: &str = "reconhost.dev/rollout-promote";
const ABORT: &str = "reconhost.dev/rollout-abort";

/// Runs a rollout command and returns what to print.
pub async fn run(command: RolloutCommand) -> anyhow::Result<String> {
    let (RolloutCommand::Status(args)
    | RolloutCommand::Promote(args)
    | RolloutCommand::Abort(args)
    | RolloutCommand::Undo(args)) = &command;
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let plugins: Api<ReconcilePlugin> = Api::all(client);
    let rp = plugins
        .get(&args.name)
        .await
        .with_context(|| format!("reading ReconcilePlugin {}", args.name))?;
    match command {
        RolloutCommand::Status(_) => Ok(status(&rp)),
        RolloutCommand::Promote(args) => annotate(&plugins, &rp, &args, PROMOTE).await,
        RolloutCommand::Abort(args) => annotate(&plugins, &rp, &args, ABORT).await,
        RolloutCommand::Undo(args) => undo(&plugins, &rp, &args).await,
    }
}

/// The rollout of `rp` for people.
fn status(rp: &ReconcilePlugin) -> String {
    let Some(status) = &rp.status else {
        return "the host has not written a status yet\n".to_owned();
    };
    let mut out = format!(
        "active: {}\n",
        status.active_digest.as_deref().unwrap_or("(none)")
    );
    match &status.rollout {
        None => out.push_str("no progressive rollout has run\n"),
        Some(r) => {
            let at = if r.phase == "Progressing" {
                format!(" at {} (step {})", r.stage, r.step + 1)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "rollout: {}{at}\n  stable:    {}\n  candidate: {}\n  {}\n",
                r.phase, r.stable, r.candidate, r.message
            ));
            if let Some(shadow) = &r.shadow {
                out.push_str(&format!(
                    "shadow: {} compared, {} diverged, on {} parent(s)\n",
                    shadow.compared, shadow.diverged, shadow.parents_diverged
                ));
                for difference in &shadow.differences {
                    out.push_str(&format!("  {difference}\n"));
                }
            }
        }
    }
    for r in &status.revisions {
        out.push_str(&format!(
            "revision {} {}: {:.1} % of parents ({}), {} calls, {} failed, {} errors\n",
            r.role, r.digest, r.percent, r.parents, r.calls, r.failed_calls, r.errors
        ));
    }
    out
}

/// Asks the host to promote or abort the current candidate.
async fn annotate(
    plugins: &Api<ReconcilePlugin>,
    rp: &ReconcilePlugin,
    args: &RolloutArgs,
    annotation: &str,
) -> anyhow::Result<String> {
    let Some(rollout) = rp.status.as_ref().and_then(|s| s.rollout.as_ref()) else {
        bail!("ReconcilePlugin {} has no rollout", args.name);
    };
    // A rolled-back or aborted candidate may still be promoted, as it is: a person accepts
    // what shadow found different. Only a candidate in progress can be aborted.
    let open = match annotation {
        PROMOTE => rollout.phase != "Promoted",
        _ => rollout.phase == "Progressing",
    };
    if !open || rollout.candidate != rp.spec.source.digest {
        bail!(
            "ReconcilePlugin {} has no rollout to {} (the last one is {}: {})",
            args.name,
            if annotation == PROMOTE {
                "promote"
            } else {
                "abort"
            },
            rollout.phase,
            rollout.message
        );
    }
    let patch = json!({"metadata": {"annotations": {annotation: rollout.candidate}}});
    plugins
        .patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotating ReconcilePlugin {}", args.name))?;
    let what = if annotation == PROMOTE {
        "promote"
    } else {
        "roll back"
    };
    Ok(format!(
        "asked the host to {what} {} on ReconcilePlugin {}\n",
        rollout.candidate, args.name
    ))
}

/// Sets the spec back to the revision before the active one, promoted at once.
async fn undo(
    plugins: &Api<ReconcilePlugin>,
    rp: &ReconcilePlugin,
    args: &RolloutArgs,
) -> anyhow::Result<String> {
    let history = rp
        .status
        .as_ref()
        .map(|s| s.history.as_slice())
        .unwrap_or_default();
    let Some(previous) = history.get(1) else {
        bail!(
            "ReconcilePlugin {} has no earlier revision in status.history",
            args.name
        );
    };
    let digest = &previous.source.digest;
    // A merge patch keeps what it does not name: the kind of source not used is named null.
    let mut source = serde_json::to_value(&previous.source)?;
    for kind in ["configMap", "oci"] {
        source
            .as_object_mut()
            .context("a source is an object")?
            .entry(kind)
            .or_insert(serde_json::Value::Null);
    }
    let patch = json!({
        "metadata": {"annotations": {PROMOTE: digest}},
        "spec": {"source": source},
    });
    plugins
        .patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting ReconcilePlugin {} back", args.name))?;
    Ok(format!(
        "ReconcilePlugin {} set back to {digest}\n",
        args.name
    ))
}
