//! `reconhost plugin uninstall`: the ReconcilePlugin goes first, and only once the host has
//! released it (every parent's finalizer off, which the host does with the plugin's kinds'
//! rights) does the rest go: the RBAC, the ConfigMap source and the ServiceAccount that
//! `install` made for it. What carries no `reconhost.dev/reconcileplugin` annotation naming the
//! ReconcilePlugin was not made for it, and stays.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DeleteParams};

use super::grants;
use crate::api::ReconcilePlugin;
use crate::cli::UninstallArgs;
use crate::identity::grant::{FOR_RECONCILE_PLUGIN, ObjectId};

/// How often the ReconcilePlugin is looked at while the host releases it.
const POLL: Duration = Duration::from_millis(500);

/// Runs `plugin uninstall` and returns what to print.
pub(super) async fn run(args: &UninstallArgs) -> anyhow::Result<String> {
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let name = &args.name;
    let plugins: Api<ReconcilePlugin> = Api::all(client.clone());
    let rp = match plugins.get_opt(name).await {
        Ok(rp) => rp,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e).with_context(|| format!("reading ReconcilePlugin {name}")),
    };
    let mut out = Vec::new();
    if let Some(rp) = &rp {
        match plugins.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting ReconcilePlugin {name}")),
        }
        let started = Instant::now();
        while plugins
            .get_opt(name)
            .await
            .with_context(|| format!("reading ReconcilePlugin {name}"))?
            .is_some()
        {
            if started.elapsed() > args.timeout {
                bail!(
                    "ReconcilePlugin {name} is being deleted but still there after {:?}: the host removes it once it has released every parent (is the host running? kubectl describe rp {name}). Its RBAC, source and ServiceAccount are left for the host to finish with; run this again",
                    args.timeout
                );
            }
            tokio::time::sleep(POLL).await;
        }
        out.push(format!("ReconcilePlugin {name} deleted"));
        out.extend(source(&client, rp, name).await?);
    }
    let rbac = grants::existing(&client, name).await?;
    out.extend(grants::delete(&client, rbac.iter().map(ObjectId::of)).await?);
    if let Some(rp) = &rp {
        out.extend(account(&client, rp, name).await?);
    }
    if out.is_empty() {
        bail!("nothing to uninstall: no ReconcilePlugin {name}, and nothing made for it");
    }
    Ok(out.iter().map(|l| format!("{l}\n")).collect())
}

/// Whether an object's annotations say it was made for ReconcilePlugin `name`.
fn made_for(annotations: Option<&std::collections::BTreeMap<String, String>>, name: &str) -> bool {
    annotations
        .and_then(|a| a.get(FOR_RECONCILE_PLUGIN))
        .is_some_and(|v| v == name)
}

/// Deletes the ConfigMap source, if `install` made it for this ReconcilePlugin.
async fn source(
    client: &kube::Client,
    rp: &ReconcilePlugin,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let Some(source) = &rp.spec.source.config_map else {
        return Ok(None);
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &source.namespace);
    let id = format!("ConfigMap {}/{}", source.namespace, source.name);
    let Some(cm) = api
        .get_metadata_opt(&source.name)
        .await
        .with_context(|| format!("reading {id}"))?
    else {
        return Ok(None);
    };
    if !made_for(cm.metadata.annotations.as_ref(), name) {
        return Ok(Some(format!("{id} kept: it was not made for {name}")));
    }
    api.delete(&source.name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {id}"))?;
    Ok(Some(format!("{id} deleted")))
}

/// Deletes the ServiceAccount, if `install` created it for this ReconcilePlugin and no other
/// ReconcilePlugin acts as it.
async fn account(
    client: &kube::Client,
    rp: &ReconcilePlugin,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let account = &rp.spec.service_account_ref;
    let id = format!("ServiceAccount {}/{}", account.namespace, account.name);
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &account.namespace);
    let Some(sa) = api
        .get_metadata_opt(&account.name)
        .await
        .with_context(|| format!("reading {id}"))?
    else {
        return Ok(None);
    };
    if !made_for(sa.metadata.annotations.as_ref(), name) {
        return Ok(None);
    }
    let others = Api::<ReconcilePlugin>::all(client.clone())
        .list(&Default::default())
        .await
        .context("listing ReconcilePlugins")?;
    if let Some(other) = others
        .items
        .iter()
        .find(|o| o.spec.service_account_ref == *account)
    {
        return Ok(Some(format!(
            "{id} kept: ReconcilePlugin {} acts as it",
            other.metadata.name.as_deref().unwrap_or_default()
        )));
    }
    api.delete(&account.name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {id}"))?;
    Ok(Some(format!("{id} deleted")))
}
