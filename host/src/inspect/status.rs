//! `reconhost status`: every ReconcilePlugin at a glance — its state, the revisions serving,
//! a rollout under way, and how its parents stand.

use std::fmt::Write as _;

use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::api::{ParentCounts, ReconcilePlugin};

/// One plugin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginLine {
    /// The ReconcilePlugin's name.
    pub name: String,
    /// The parent kind, `apiVersion/kind`.
    pub parent: String,
    /// The plugin's own name and version.
    pub plugin: Option<String>,
    /// `Running`, `Suspended`, `UpgradeFailed`, ...: the `Ready` condition's reason (its status
    /// beside it).
    pub state: String,
    /// The `Ready` condition's message, whole.
    pub message: String,
    /// The revisions serving now, `digest (role, parents)` (`status.revisions`), else the
    /// active digest.
    pub revisions: Vec<String>,
    /// A rollout's stage, when one is under way or was the last.
    pub rollout: Option<String>,
    /// How its parents stand.
    pub parents: Option<ParentCounts>,
    /// Whether too many of its parents fail (`Degraded=True`), and why.
    pub degraded: Option<String>,
}

/// Every ReconcilePlugin, by name.
pub async fn gather(client: &kube::Client) -> anyhow::Result<Vec<PluginLine>> {
    let plugins = Api::<ReconcilePlugin>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let mut lines: Vec<PluginLine> = plugins.items.iter().map(line).collect();
    lines.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(lines)
}

fn line(rp: &ReconcilePlugin) -> PluginLine {
    let status = rp.status.clone().unwrap_or_default();
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let ready = condition("Ready");
    let mut revisions: Vec<String> = status
        .revisions
        .iter()
        .map(|r| format!("{} ({}, {} parents)", r.digest, r.role, r.parents))
        .collect();
    if revisions.is_empty() {
        revisions.extend(status.active_digest.clone());
    }
    PluginLine {
        name: rp.metadata.name.clone().unwrap_or_default(),
        parent: format!("{}/{}", rp.spec.parent.api_version, rp.spec.parent.kind),
        plugin: status
            .plugin
            .as_ref()
            .map(|p| format!("{} {}", p.name, p.version)),
        state: ready.map_or_else(
            || "Unknown".to_owned(),
            |c| format!("{} ({})", c.reason, c.status),
        ),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        revisions,
        rollout: status
            .rollout
            .as_ref()
            .map(|r| format!("{} {}", r.phase, r.stage)),
        parents: status.parents.clone(),
        degraded: condition("Degraded")
            .filter(|c| c.status == "True")
            .map(|c| c.message.clone()),
    }
}

/// The table: one block per plugin.
pub fn table(plugins: &[PluginLine]) -> String {
    if plugins.is_empty() {
        return "no ReconcilePlugins\n".into();
    }
    let mut out = String::new();
    for p in plugins {
        let _ = writeln!(
            out,
            "{}  {}  {}",
            p.name,
            p.plugin.as_deref().unwrap_or("(not loaded)"),
            p.state
        );
        let _ = writeln!(out, "  parent     {}", p.parent);
        if !p.message.is_empty() {
            let _ = writeln!(out, "  ready      {}", p.message);
        }
        for revision in &p.revisions {
            let _ = writeln!(out, "  revision   {revision}");
        }
        if let Some(stage) = &p.rollout {
            let _ = writeln!(out, "  rollout    {stage}");
        }
        if let Some(c) = &p.parents {
            let paused = if c.paused > 0 {
                format!(", {} paused", c.paused)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  parents    {} served, {} synced, {} failing{paused}",
                c.served, c.synced, c.failing
            );
        }
        if let Some(degraded) = &p.degraded {
            let _ = writeln!(out, "  DEGRADED   {degraded}");
        }
    }
    out
}
