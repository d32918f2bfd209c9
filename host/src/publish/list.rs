//! `reconhost plugin list`: the installed plugins at a glance, with what `plugin uninstall`
//! would remove beside each (the RBAC objects `install --rbac` made for it).

use anyhow::Context as _;
use kube::api::{Api, ListParams};

use super::grants;
use crate::api::ReconcilePlugin;
use crate::cli::ListArgs;

/// Runs `plugin list` and returns the table to print.
pub(super) async fn run(args: &ListArgs) -> anyhow::Result<String> {
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let plugins: Api<ReconcilePlugin> = Api::all(client.clone());
    let mut listed = plugins
        .list(&ListParams::default())
        .await
        .context("listing ReconcilePlugins")?
        .items;
    if listed.is_empty() {
        return Ok("no plugins installed (kubectl get reconcileplugins)\n".to_owned());
    }
    listed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rows = vec![
        [
            "NAME",
            "PARENT",
            "VERSION",
            "READY",
            "SOURCE",
            "SERVICE ACCOUNT",
            "RBAC",
        ]
        .map(str::to_owned),
    ];
    for rp in &listed {
        let name = rp.metadata.name.clone().unwrap_or_default();
        let rbac = grants::existing(&client, &name).await?.len();
        rows.push(row(rp, &name, rbac));
    }
    Ok(table(&rows))
}

/// One plugin's row.
fn row(rp: &ReconcilePlugin, name: &str, rbac: usize) -> [String; 7] {
    let spec = &rp.spec;
    let status = rp.status.as_ref();
    let version = status
        .and_then(|s| s.plugin.as_ref())
        .map_or_else(|| "-".to_owned(), |p| p.version.clone());
    let ready = status
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map_or_else(
            || "Unknown".to_owned(),
            |c| {
                if c.status == "True" {
                    "True".to_owned()
                } else {
                    format!("{} ({})", c.status, c.reason)
                }
            },
        );
    let ready = if spec.suspend {
        format!("{ready}, suspended")
    } else {
        ready
    };
    let source = match (&spec.source.config_map, &spec.source.oci) {
        (Some(cm), _) => format!("configmap {}/{}", cm.namespace, cm.name),
        (None, Some(oci)) => format!("oci {}", oci.reference),
        (None, None) => "-".to_owned(),
    };
    let account = format!(
        "{}/{}",
        spec.service_account_ref.namespace, spec.service_account_ref.name
    );
    let rbac = if rbac == 0 {
        "none made by install".to_owned()
    } else {
        format!("{rbac} object(s) made by install")
    };
    [
        name.to_owned(),
        format!("{}/{}", spec.parent.api_version, spec.parent.kind),
        version,
        ready,
        source,
        account,
        rbac,
    ]
}

/// Left-aligned columns three spaces apart, as kubectl prints them.
fn table(rows: &[[String; 7]]) -> String {
    let mut widths = [0; 7];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_should_align_columns() {
        let rows = [
            ["NAME", "B", "C", "D", "E", "F", "G"].map(str::to_owned),
            [
                "webapp.examples.reconhost.dev",
                "b",
                "c",
                "d",
                "e",
                "f",
                "g",
            ]
            .map(str::to_owned),
        ];
        let shown = table(&rows);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0].find(" B "), lines[1].find(" b "), "{shown}");
        assert!(lines[1].ends_with("   g"), "{shown}");
    }
}
