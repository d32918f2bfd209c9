//! `reconhost plugin install | manifest | push | rbac | inspect | uninstall | rollout`: how a plugin
//! author gets a component into a cluster, and out again. The component is loaded locally
//! first (its `info()` names the parent kind, and a component that does not load is better
//! refused here than in the cluster), uploaded to a ConfigMap or an OCI registry, and pinned by
//! digest in its ReconcilePlugin; with `--rbac`, the grant it asks for is checked and applied.

mod grants;
mod inspect;
mod list;
mod narrow;
mod rollout;
mod uninstall;

use crate::selector::Selector;
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use crate::api::{
    Compression, ConfigMapSource, LocalObjectRef, OciSource, ParentRef, ReconcilePlugin,
    ReconcilePluginSpec, ServiceAccountRef, Source, plugin_resource_name,
};
use crate::cli::{InstallArgs, PluginCommand, PushArgs, RegistryArgs};
use crate::identity::Identity;
use crate::identity::grant::{self, Changes, FOR_RECONCILE_PLUGIN, Scope};
use crate::runtime::{Limits, Plugin, Runtime, RuntimeConfig, sha256_hex};
use crate::source::configmap::{CONFIGMAP_LIMIT, USE_OCI, gzip};
use crate::source::oci::Registry;
use k8s_openapi::api::core::v1::ServiceAccount;

/// The field manager of what the CLI applies.
const CLI_FIELD_MANAGER: &str = "reconhost-cli";

/// The key a ConfigMap source keeps the component under.
const KEY: &str = "plugin.wasm";

/// Below the ConfigMap limit by enough for the object's own metadata.
const CONFIGMAP_ROOM: usize = CONFIGMAP_LIMIT - 16 * 1024;

/// Runs a `reconhost plugin` command and returns what to print.
pub async fn run(command: PluginCommand) -> anyhow::Result<String> {
    match command {
        PluginCommand::Push(args) => push(&args).await,
        PluginCommand::Manifest(args) => {
            let planned = plan(&args, None).await?;
            let mut out = String::new();
            if let Some(cm) = &planned.config_map {
                out.push_str(&serde_saphyr::to_string(cm)?);
                out.push_str("---\n");
            }
            if let Some(reference) = &args.oci {
                out.push_str(&format!(
                    "# push the component first: reconhost plugin push {} --oci {reference}\n",
                    args.file.display()
                ));
            }
            out.push_str(&serde_saphyr::to_string(&planned.plugin)?);
            Ok(out)
        }
        PluginCommand::Install(args) => install(&args).await,
        PluginCommand::Rbac(args) => {
            let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
            let bytes = std::fs::read(&args.file)
                .with_context(|| format!("reading plugin {}", args.file.display()))?;
            let plugin = load(&args.file, bytes).await?;
            let account = split_ref(&args.service_account, "--service-account")?;
            let rp = plugin_resource_name(&plugin.info().parent);
            let scope = grants::scope(&args.grant, client.default_namespace());
            let who = Identity::new(account.0, account.1);
            let planned = grants::plan(&client, &plugin, &rp, &who, scope).await?;
            grants::refuse_dangers(&planned, &plugin.info().name, args.grant.allow_dangerous)?;
            let mut out = format!(
                "# RBAC for plugin {} as ReconcilePlugin {rp}, acting as {who}, granted in {}\n",
                plugin.info().name,
                planned.scope
            );
            for danger in &planned.dangers {
                out.push_str(&format!("# DANGEROUS: {danger}\n"));
            }
            if let Some(note) = &planned.host_note {
                out.push_str(&format!("# NOTE: {note}\n"));
            }
            for object in planned.objects {
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(&object)?);
            }
            Ok(out)
        }
        PluginCommand::List(args) => list::run(&args).await,
        PluginCommand::Uninstall(args) => uninstall::run(&args).await,
        PluginCommand::Inspect(args) => inspect::run(&args).await,
        PluginCommand::Rollout(command) => rollout::run(command).await,
    }
}

/// What `install` applies.
struct Planned {
    plugin: ReconcilePlugin,
    /// The component, loaded.
    component: Plugin,
    config_map: Option<ConfigMap>,
    bytes: Vec<u8>,
}

/// The ReconcilePlugin's `spec.namespaces`: where its grant is bound. Named namespaces, or
/// with `--rbac` (unless `--cluster-wide`) the kubeconfig's namespace; else unset.
fn namespaces(args: &InstallArgs, default_namespace: Option<&str>) -> Option<Vec<String>> {
    let default = match default_namespace {
        Some(ns) if args.rbac => ns,
        // Without a grant to match, only what is named.
        _ if args.grant.parent_namespaces.is_empty() => return None,
        _ => "",
    };
    match grants::scope(&args.grant, default) {
        Scope::ClusterWide => None,
        Scope::Namespaces(list) => Some(list),
    }
}

/// What `install` (or `manifest`) would apply; `default_namespace` is the kubeconfig's, when a
/// cluster is at hand.
async fn plan(args: &InstallArgs, default_namespace: Option<&str>) -> anyhow::Result<Planned> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("reading plugin {}", args.file.display()))?;
    let account = split_ref(&args.service_account, "--service-account")?;
    // What fits a ConfigMap is decided before compiling: a component too large is refused with
    // the way out, whatever else is wrong with it.
    let stored = match &args.configmap {
        Some(_) => Some(for_config_map(&args.file, &bytes)?),
        None => None,
    };
    let component = load(&args.file, bytes.clone()).await?;
    let info = component.info();
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    let rp_name = plugin_resource_name(&info.parent);
    let config: Option<Value> = match &args.config {
        Some(text) => Some(serde_json::from_str(text).context("--config is not JSON")?),
        None => None,
    };
    let mut source = Source {
        digest,
        config_map: None,
        oci: None,
    };
    let mut config_map = None;
    if let Some(target) = &args.configmap {
        let (namespace, name) = split_ref(target, "--configmap")?;
        if namespace != account.0 {
            bail!(
                "the ConfigMap must be in the ServiceAccount's namespace {:?} (the plugin's namespace), not {namespace:?}",
                account.0
            );
        }
        let (stored, compression) = stored.expect("checked above for --configmap");
        config_map = Some(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    CLI_FIELD_MANAGER.to_owned(),
                )])),
                // `plugin uninstall` deletes what carries it.
                annotations: Some(BTreeMap::from([(
                    FOR_RECONCILE_PLUGIN.to_owned(),
                    rp_name.clone(),
                )])),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([(KEY.to_owned(), ByteString(stored))])),
            immutable: Some(false),
            ..ConfigMap::default()
        });
        source.config_map = Some(ConfigMapSource {
            namespace,
            name,
            key: KEY.to_owned(),
            compression,
        });
    }
    if let Some(reference) = &args.oci {
        source.oci = Some(OciSource {
            reference: reference.clone(),
            pull_secret_ref: args
                .pull_secret
                .as_ref()
                .map(|name| LocalObjectRef { name: name.clone() }),
            public_keys: None,
        });
    }
    let spec = ReconcilePluginSpec {
        parent: ParentRef {
            api_version: info.parent.api_version.clone(),
            kind: info.parent.kind.clone(),
        },
        source,
        service_account_ref: ServiceAccountRef {
            namespace: account.0,
            name: account.1,
        },
        limits: None,
        config,
        suspend: false,
        parent_selector: args
            .parent_selector
            .as_ref()
            .filter(|s| !s.is_empty())
            .map(Selector::to_label_selector),
        namespaces: namespaces(args, default_namespace),
        rollout: None,
        resync_period: None,
        ignore_parent_status_changes: false,
        adopt_orphans: None,
        decorator: None,
    };
    let plugin = ReconcilePlugin::new(&rp_name, spec);
    Ok(Planned {
        plugin,
        component,
        config_map,
        bytes,
    })
}

/// The bytes to store in a ConfigMap: as they are, or gzipped when that is what fits.
fn for_config_map(path: &Path, bytes: &[u8]) -> anyhow::Result<(Vec<u8>, Compression)> {
    if bytes.len() <= CONFIGMAP_ROOM {
        return Ok((bytes.to_vec(), Compression::None));
    }
    let packed = gzip(bytes);
    if packed.len() > CONFIGMAP_ROOM {
        bail!(
            "{} is {} bytes ({} gzipped){USE_OCI}",
            path.display(),
            bytes.len(),
            packed.len()
        );
    }
    Ok((packed, Compression::Gzip))
}

async fn install(args: &InstallArgs) -> anyhow::Result<String> {
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let planned = plan(args, Some(client.default_namespace())).await?;
    let params = PatchParams::apply(CLI_FIELD_MANAGER).force();
    let rp_name = planned.plugin.metadata.name.clone().unwrap_or_default();
    let mut out = String::new();
    // Everything that can refuse is asked before anything is written or pushed.
    let rbac = match args.rbac {
        true => Some(plan_rbac(&client, args, &planned, &rp_name).await?),
        false => None,
    };
    if let Some(reference) = &args.oci {
        let digest = registry(&args.registry)
            .push(reference, planned.bytes.clone(), &auth(&args.registry))
            .await?;
        out.push_str(&format!("pushed {reference} ({digest})\n"));
    }
    if let Some((rbac, _)) = &rbac {
        for danger in &rbac.dangers {
            eprintln!("warning: granting, as --allow-dangerous says: {danger}");
        }
        if let Some(note) = &rbac.host_note {
            eprintln!("note: {note}");
        }
        out.push_str(&service_account(&client, &planned.plugin, &rp_name).await?);
        for line in grants::apply(&client, &rbac.objects, &params).await? {
            out.push_str(&format!("{line}\n"));
        }
        out.push_str(&format!("granted in {}\n", rbac.scope));
    }
    if let Some(cm) = &planned.config_map {
        let namespace = cm.metadata.namespace.as_deref().unwrap_or_default();
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        api.patch(name, &params, &Patch::Apply(cm))
            .await
            .with_context(|| format!("applying ConfigMap {namespace}/{name}"))?;
        out.push_str(&format!("configmap/{name} applied in {namespace}\n"));
    }
    let api: Api<ReconcilePlugin> = Api::all(client.clone());
    let before = api
        .get_opt(&rp_name)
        .await
        .with_context(|| format!("reading ReconcilePlugin {rp_name}"))?;
    match api
        .patch(&rp_name, &params, &Patch::Apply(&planned.plugin))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => bail!(
            "the API server does not know ReconcilePlugin: install the CRD first (reconhost crds | kubectl apply -f -)"
        ),
        Err(e) => return Err(e).with_context(|| format!("applying ReconcilePlugin {rp_name}")),
    }
    out.push_str(&format!(
        "reconcileplugin/{rp_name} applied ({}); watch it with: kubectl get rp {rp_name}\n",
        planned.plugin.spec.source.digest
    ));
    // Narrowed last: parents the ReconcilePlugin no longer reconciles are released first, then
    // the grants there go.
    if let Some(before) = before {
        let released = narrow::release_dropped(
            &client,
            &rp_name,
            &crate::model::KindRef::from(&planned.plugin.spec.parent),
            &crate::model::finalizer_name(&planned.component.info().name),
            before.spec.namespaces.as_deref(),
            planned.plugin.spec.namespaces.as_deref(),
        )
        .await?;
        if let Some(line) = released {
            out.push_str(&format!("{line}\n"));
        }
    }
    if let Some((_, changes)) = rbac {
        for grant in &changes.removed {
            out.push_str(&format!("no longer granted: {grant}\n"));
        }
        for line in grants::delete(&client, changes.stale).await? {
            out.push_str(&format!("{line}\n"));
        }
    }
    Ok(out)
}

/// The RBAC an install applies and what it changes over an earlier install, after every check
/// that can refuse it: the plugin's name is free, no object it would write is someone else's,
/// dangerous grants are allowed, and what an upgrade adds is approved.
async fn plan_rbac(
    client: &kube::Client,
    args: &InstallArgs,
    planned: &Planned,
    rp_name: &str,
) -> anyhow::Result<(grants::Planned, Changes)> {
    let account = &planned.plugin.spec.service_account_ref;
    let who = Identity::new(&account.namespace, &account.name);
    let info = planned.component.info();
    // The plugin's name is its field manager and finalizer, so it must not be another
    // installed plugin's.
    name_is_free(client, rp_name, &info.name).await?;
    let scope = grants::scope(&args.grant, client.default_namespace());
    let rbac = grants::plan(client, &planned.component, rp_name, &who, scope).await?;
    grants::refuse_dangers(&rbac, &info.name, args.grant.allow_dangerous)?;
    grants::not_someone_elses(client, &rbac.objects, rp_name).await?;
    let existing = grants::existing(client, rp_name).await?;
    let changes = grant::changes(&existing, &rbac.objects);
    if !existing.is_empty() {
        grants::refuse_additions(&changes, rp_name, args.approve_new_grants)?;
    }
    Ok((rbac, changes))
}

/// Creates the plugin's ServiceAccount if it is missing, marked as made for ReconcilePlugin
/// `rp_name` (so that `uninstall` removes it); one that exists is left as it is.
async fn service_account(
    client: &kube::Client,
    plugin: &ReconcilePlugin,
    rp_name: &str,
) -> anyhow::Result<String> {
    let account = &plugin.spec.service_account_ref;
    let who = format!("{}/{}", account.namespace, account.name);
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &account.namespace);
    if api
        .get_metadata_opt(&account.name)
        .await
        .with_context(|| format!("reading ServiceAccount {who}"))?
        .is_some()
    {
        return Ok(String::new());
    }
    let object = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(account.name.clone()),
            namespace: Some(account.namespace.clone()),
            annotations: Some(BTreeMap::from([(
                FOR_RECONCILE_PLUGIN.to_owned(),
                rp_name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match api.create(&Default::default(), &object).await {
        Ok(_) => Ok(format!("ServiceAccount {who} created\n")),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("creating ServiceAccount {who}")),
    }
}

/// Refuses when another ReconcilePlugin already runs a plugin called `plugin`.
async fn name_is_free(client: &kube::Client, rp_name: &str, plugin: &str) -> anyhow::Result<()> {
    let api: Api<ReconcilePlugin> = Api::all(client.clone());
    let installed = match api.list(&Default::default()).await {
        Ok(list) => list.items,
        // No CRD yet: nothing is installed, and applying the ReconcilePlugin says so below.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e).context("listing ReconcilePlugins"),
    };
    for rp in installed {
        let other = rp.metadata.name.clone().unwrap_or_default();
        let runs = rp.status.as_ref().and_then(|s| s.plugin.as_ref());
        if other != rp_name && runs.is_some_and(|p| p.name == plugin) {
            bail!(
                "a plugin named {plugin:?} already runs as ReconcilePlugin {other}: a plugin's name is its field manager (reconhost/{plugin}) and finalizer, so it must be unique; nothing was changed"
            );
        }
    }
    Ok(())
}

async fn push(args: &PushArgs) -> anyhow::Result<String> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("reading plugin {}", args.file.display()))?;
    load(&args.file, bytes.clone()).await?;
    let digest = registry(&args.registry)
        .push(&args.oci, bytes, &auth(&args.registry))
        .await?;
    Ok(format!("{digest}\n"))
}

/// Loads the component locally, so one that would not load is refused before it is published.
async fn load(path: &Path, bytes: Vec<u8>) -> anyhow::Result<Plugin> {
    let origin = path.display().to_string();
    tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(RuntimeConfig {
            compiler: crate::runtime::Compiler::this_binary()?,
            ..RuntimeConfig::default()
        })?;
        crate::render::say_compiling(&runtime, &origin, &bytes);
        Ok(Plugin::load(&runtime, &origin, &bytes, Limits::default())?)
    })
    .await?
}

fn registry(args: &RegistryArgs) -> Registry {
    Registry::new(&args.insecure_registries)
}

fn auth(args: &RegistryArgs) -> RegistryAuth {
    match (
        &args.registry_username,
        std::env::var("RECONHOST_REGISTRY_PASSWORD"),
    ) {
        (Some(user), Ok(password)) => RegistryAuth::Basic(user.clone(), password),
        _ => RegistryAuth::Anonymous,
    }
}

/// `namespace/name`.
fn split_ref(text: &str, flag: &str) -> anyhow::Result<(String, String)> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => bail!("{flag} takes namespace/name, not {text:?}"),
    }
}
