//! `reconhost plugin install | manifest | push`: how a plugin author gets a component into a
//! cluster. The component is loaded locally first (its `info()` names the parent kind, and a
//! component that does not load is better refused here than in the cluster), uploaded to a
//! ConfigMap or an OCI registry, and pinned by digest in its ReconcilePlugin.

use crate::selector::Selector;
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams};
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use crate::api::{
    Compression, ConfigMapSource, LocalObjectRef, OciSource, ParentRef, ReconcilePlugin,
    ReconcilePluginSpec, ServiceAccountRef, Source, plugin_resource_name,
};
use crate::cache::informers::resolve;
use crate::cli::{InstallArgs, PluginCommand, PushArgs, RegistryArgs};
use crate::identity::Identity;
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
            let planned = plan(&args).await?;
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
            let objects = rbac(&client, &plugin, &Identity::new(account.0, account.1)).await?;
            let mut out = String::new();
            for object in objects {
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(&object)?);
            }
            Ok(out)
        }
    }
}

/// The ClusterRole and binding `plugin` needs, its kinds resolved through `client`'s discovery,
/// named for the ReconcilePlugin it is installed as.
async fn rbac(
    client: &kube::Client,
    plugin: &Plugin,
    who: &Identity,
) -> anyhow::Result<Vec<Value>> {
    let info = plugin.info();
    let resolve = |kind: &crate::model::KindRef| {
        let kind = kind.clone();
        async move {
            resolve(client, &kind).await.with_context(|| {
                format!("the API server does not serve {kind}, which the plugin declares: install its CRD first")
            })
        }
    };
    let parent = resolve(&info.parent).await?;
    let mut children = Vec::new();
    for kind in &info.children {
        children.push(resolve(kind).await?);
    }
    let mut reads = Vec::new();
    for kind in &info.reads {
        reads.push(resolve(kind).await?);
    }
    use crate::identity::rbac;
    Ok(rbac::manifests(
        &plugin_resource_name(&info.parent),
        &info.name,
        who,
        &rbac::rules(&parent, &children, &reads),
        &rbac::host_rules(&parent, &children, &reads),
    ))
}

/// What `install` applies.
struct Planned {
    plugin: ReconcilePlugin,
    config_map: Option<ConfigMap>,
    bytes: Vec<u8>,
}

async fn plan(args: &InstallArgs) -> anyhow::Result<Planned> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("reading plugin {}", args.file.display()))?;
    let account = split_ref(&args.service_account, "--service-account")?;
    // What fits a ConfigMap is decided before compiling: a component too large is refused with
    // the way out, whatever else is wrong with it.
    let stored = match &args.configmap {
        Some(_) => Some(for_config_map(&args.file, &bytes)?),
        None => None,
    };
    let plugin = load(&args.file, bytes.clone()).await?;
    let info = plugin.info();
    let digest = format!("sha256:{}", sha256_hex(&bytes));
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
    };
    let plugin = ReconcilePlugin::new(&plugin_resource_name(&info.parent), spec);
    Ok(Planned {
        plugin,
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
    let planned = plan(args).await?;
    let mut out = String::new();
    if let Some(reference) = &args.oci {
        let digest = registry(&args.registry)
            .push(reference, planned.bytes.clone(), &auth(&args.registry))
            .await?;
        out.push_str(&format!("pushed {reference} ({digest})\n"));
    }
    let client = crate::client::client(args.kubeconfig.as_deref(), None).await?;
    let params = PatchParams::apply(CLI_FIELD_MANAGER).force();
    if args.rbac {
        let who = Identity::new(
            &planned.plugin.spec.service_account_ref.namespace,
            &planned.plugin.spec.service_account_ref.name,
        );
        let bytes = planned.bytes.clone();
        let plugin = load(&args.file, bytes).await?;
        let rp_name = planned.plugin.metadata.name.clone().unwrap_or_default();
        // Before anything is written: the plugin's name is its field manager and finalizer, so
        // it must not be another installed plugin's.
        name_is_free(&client, &rp_name, &plugin.info().name).await?;
        let objects = rbac(&client, &plugin, &who).await?;
        for object in &objects {
            not_someone_elses(&client, object, &rp_name).await?;
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &who.namespace);
        let account = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": who.name, "namespace": who.namespace}});
        accounts
            .patch(&who.name, &params, &Patch::Apply(&account))
            .await
            .with_context(|| format!("applying ServiceAccount {who}"))?;
        for object in objects {
            let (api, kind, name) = rbac_api(&client, &object);
            api.patch(&name, &params, &Patch::Apply(&object))
                .await
                .with_context(|| format!("applying {kind} {name}"))?;
            out.push_str(&format!("{}/{name} applied\n", kind.to_lowercase()));
        }
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
    let name = planned.plugin.metadata.name.clone().unwrap_or_default();
    let api: Api<ReconcilePlugin> = Api::all(client);
    match api
        .patch(&name, &params, &Patch::Apply(&planned.plugin))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => bail!(
            "the API server does not know ReconcilePlugin: install the CRD first (reconhost crds | kubectl apply -f -)"
        ),
        Err(e) => return Err(e).with_context(|| format!("applying ReconcilePlugin {name}")),
    }
    out.push_str(&format!(
        "reconcileplugin/{name} applied ({}); watch it with: kubectl get rp {name}\n",
        planned.plugin.spec.source.digest
    ));
    Ok(out)
}

/// The API of an RBAC object `manifests` made, its kind and its name.
fn rbac_api(client: &kube::Client, object: &Value) -> (Api<DynamicObject>, String, String) {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &kind),
        &format!("{}s", kind.to_lowercase()),
    );
    (Api::all_with(client.clone(), &resource), kind, name)
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

/// Refuses to apply `object` over one of the same name that was not written for ReconcilePlugin
/// `rp_name` (a forced apply would take its fields, and with them someone else's grant).
async fn not_someone_elses(
    client: &kube::Client,
    object: &Value,
    rp_name: &str,
) -> anyhow::Result<()> {
    let (api, kind, name) = rbac_api(client, object);
    let existing = api
        .get_opt(&name)
        .await
        .with_context(|| format!("reading {kind} {name}"))?;
    if let Some(existing) = existing {
        let existing = serde_json::to_value(existing)?;
        if !crate::identity::rbac::made_for(&existing, rp_name) {
            bail!(
                "{kind} {name} exists and was not written by reconhost for ReconcilePlugin {rp_name} (no {} annotation naming it); refusing to overwrite it, nothing was changed",
                crate::identity::rbac::FOR_RECONCILE_PLUGIN
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
