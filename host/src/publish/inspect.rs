//! `reconhost plugin inspect`: what a component is and what it will ask for, before anything is
//! applied (Kubewarden's `kwctl inspect`): its name, version, contract, kinds and finalizer, the
//! RBAC `--rbac` would grant with the dangerous grants named, its size and shape, and what
//! compiling it costs, measured by compiling it under the host's compile budget.
//!
//! No cluster is needed: kinds are turned into resources with kube's plural rules, which name
//! every built-in kind that counts as dangerous as RBAC does; `plugin rbac` resolves them
//! through discovery.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;

use super::{auth, registry};
use crate::cache::ResolvedKind;
use crate::cli::{InspectArgs, InspectFormat};
use crate::identity::{grant, rbac};
use crate::model::KindRef;
use crate::runtime::{CompileBudget, Compiler, Limits, Plugin, Runtime, RuntimeConfig, sha256_hex};

/// What `inspect` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    source: String,
    digest: String,
    bytes: usize,
    name: String,
    version: String,
    contract: String,
    parent: String,
    reconcile_plugin: String,
    children: Vec<String>,
    /// Update strategies other than in place, by child kind (contract 0.2).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    update_strategies: BTreeMap<String, crate::model::UpdateStrategy>,
    reads: Vec<String>,
    finalizer: bool,
    ignore_status_changes: bool,
    rbac: Vec<String>,
    host_rbac: Vec<String>,
    dangerous: Vec<String>,
    shape: ShapeReport,
    compile: CompileReport,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ShapeReport {
    core_modules: u32,
    functions: u32,
    largest_function_bytes: u32,
    code_bytes: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CompileReport {
    seconds: f64,
    /// The compile worker's peak resident memory (0 where it could not be measured).
    peak_mib: u64,
    budget: String,
}

/// Runs `plugin inspect` and returns what to print.
pub(super) async fn run(args: &InspectArgs) -> anyhow::Result<String> {
    let (bytes, source) = obtain(args).await?;
    let digest = sha256_hex(&bytes);
    let budget = CompileBudget::default();
    let shape = crate::runtime::check_shape(&source, &digest, &bytes, &budget)?;
    // A cache of its own, emptied after, so the compile is measured, not a cache hit.
    let cache = std::env::temp_dir().join(format!("reconhost-inspect-{}", std::process::id()));
    let started = Instant::now();
    let loaded = load(&source, bytes.clone(), cache.clone()).await;
    let seconds = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&cache);
    let plugin = loaded?;
    let info = plugin.info();
    let kind = |k: &KindRef| guess(k);
    let parent = kind(&info.parent);
    let children: Vec<ResolvedKind> = info.children.iter().map(kind).collect();
    let reads: Vec<ResolvedKind> = info.reads.iter().map(kind).collect();
    let rules = rbac::rules(&parent, &children, &reads);
    let host_rules = rbac::host_rules(&parent, &children, &reads);
    let as_lines = |rules: &[rbac::Rule]| -> Vec<String> {
        rules
            .iter()
            .map(|r| format!("{} {}", r.verbs.join(", "), r.qualified()))
            .collect()
    };
    let report = Report {
        source,
        digest: format!("sha256:{digest}"),
        bytes: bytes.len(),
        name: info.name.clone(),
        version: info.version.clone(),
        contract: plugin.contract().to_owned(),
        parent: info.parent.to_string(),
        reconcile_plugin: crate::api::plugin_resource_name(&info.parent),
        children: info.children.iter().map(ToString::to_string).collect(),
        update_strategies: info
            .strategies
            .0
            .iter()
            .map(|(kind, strategy)| (kind.to_string(), strategy.clone()))
            .collect(),
        reads: info.reads.iter().map(ToString::to_string).collect(),
        finalizer: info.finalizer,
        ignore_status_changes: info.ignore_status_changes,
        rbac: as_lines(&rules),
        host_rbac: as_lines(&host_rules),
        dangerous: grant::dangers(&rules, &host_rules, false),
        shape: ShapeReport {
            core_modules: shape.modules,
            functions: shape.functions,
            largest_function_bytes: shape.largest_function,
            code_bytes: shape.code_bytes,
        },
        compile: CompileReport {
            seconds: (seconds * 100.0).round() / 100.0,
            peak_mib: children_peak_kib() >> 10,
            budget: budget.describe(),
        },
    };
    Ok(match args.output {
        InspectFormat::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        InspectFormat::Text => text(&report),
    })
}

/// The component's bytes and where they came from: a file, or an OCI reference.
async fn obtain(args: &InspectArgs) -> anyhow::Result<(Vec<u8>, String)> {
    let path = Path::new(&args.source);
    if path.exists() {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading plugin {}", path.display()))?;
        return Ok((bytes, path.display().to_string()));
    }
    let bytes = registry(&args.registry)
        .pull(
            &args.source,
            None,
            &auth(&args.registry),
            crate::source::DEFAULT_MAX_BYTES,
            &[],
        )
        .await
        .with_context(|| {
            format!(
                "{} is neither a file nor a pullable OCI artifact",
                args.source
            )
        })?;
    Ok((bytes, args.source.clone()))
}

/// Compiles the component in a worker, under the default budget, with its own cache.
async fn load(origin: &str, bytes: Vec<u8>, cache_dir: PathBuf) -> anyhow::Result<Plugin> {
    let origin = origin.to_owned();
    tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(RuntimeConfig {
            compiler: Compiler::this_binary()?,
            cache_dir,
            ..RuntimeConfig::default()
        })?;
        Ok(Plugin::load(&runtime, &origin, &bytes, Limits::default())?)
    })
    .await?
}

/// The largest resident size of any child this process waited for (the compile worker), KiB.
fn children_peak_kib() -> u64 {
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let done = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut usage) };
    if done == 0 {
        u64::try_from(usage.ru_maxrss).unwrap_or(0)
    } else {
        0
    }
}

/// A kind as RBAC would name it, its plural guessed by kube's own rules (`ApiResource::from_gvk`,
/// which knows Kubernetes' irregular plurals); scope is left to discovery at install.
fn guess(kind: &KindRef) -> ResolvedKind {
    let (group, version) = match kind.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", kind.api_version.as_str()),
    };
    ResolvedKind {
        resource: ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind.kind)),
        namespaced: true,
        has_status: true,
    }
}

/// The report for people.
fn text(r: &Report) -> String {
    let list = |items: &[String]| {
        if items.is_empty() {
            "  (none)\n".to_owned()
        } else {
            items.iter().map(|i| format!("  {i}\n")).collect()
        }
    };
    // A child kind that does not change in place says how it does.
    let children: Vec<String> = r
        .children
        .iter()
        .map(|kind| match r.update_strategies.get(kind) {
            Some(strategy) => format!("{kind} (update: {:?})", strategy.method),
            None => kind.clone(),
        })
        .collect();
    let mut out = format!(
        "plugin {} {} ({})\n  source: {}\n  digest: {} ({} bytes)\n  parent: {} (ReconcilePlugin {})\n  finalizer on parents: {}\nchildren:\n{}reads:\n{}",
        r.name,
        r.version,
        r.contract,
        r.source,
        r.digest,
        r.bytes,
        r.parent,
        r.reconcile_plugin,
        if r.finalizer { "yes" } else { "no" },
        list(&children),
        list(&r.reads),
    );
    out.push_str("its ServiceAccount will be granted (reconhost plugin rbac):\n");
    out.push_str(&list(&r.rbac));
    out.push_str("the host will watch:\n");
    out.push_str(&list(&r.host_rbac));
    if r.dangerous.is_empty() {
        out.push_str("dangerous grants: none\n");
    } else {
        out.push_str("DANGEROUS grants (installing them needs --allow-dangerous):\n");
        out.push_str(&list(&r.dangerous));
    }
    out.push_str(&format!(
        "shape: {} core modules, {} functions, largest {} bytes, {} bytes of code\ncompile: {} s, peak {} MiB ({})\n",
        r.shape.core_modules,
        r.shape.functions,
        r.shape.largest_function_bytes,
        r.shape.code_bytes,
        r.compile.seconds,
        r.compile.peak_mib,
        r.compile.budget
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_should_be_named_as_rbac_names_them() {
        let plural = |api: &str, kind: &str| guess(&KindRef::new(api, kind)).resource.plural;
        assert_eq!(plural("v1", "Secret"), "secrets");
        assert_eq!(
            plural("networking.k8s.io/v1", "NetworkPolicy"),
            "networkpolicies"
        );
        assert_eq!(plural("networking.k8s.io/v1", "Ingress"), "ingresses");
        let deployment = guess(&KindRef::new("apps/v1", "Deployment"));
        assert_eq!(deployment.resource.group, "apps");
        assert_eq!(deployment.resource.plural, "deployments");
    }
}
