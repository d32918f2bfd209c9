//! `reconhost render`: runs a plugin offline, with the same runtime and planner as the live
//! host, and prints what the host would do. `get` and `list` are answered from `--related`
//! files; `--observed` files stand for the children the host would have found.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{OutputFormat, RenderArgs};
use crate::model::{Condition, Event, ReconcileRequest};
use crate::planner::{self, Plan};
use crate::runtime::{Limits, Plugin, Runtime, StaticObjects};

/// What `render` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rendered {
    /// The plugin's name, version and digest.
    pub plugin: PluginSummary,
    /// `namespace/name` of the parent.
    pub parent: String,
    /// The plan: one entry per child with its action, the new status, the finalizer change.
    #[serde(flatten)]
    pub plan: Plan,
    /// Conditions the plugin set.
    pub conditions: Vec<Condition>,
    /// Events the plugin asked for.
    pub events: Vec<Event>,
    /// Requeue delay in milliseconds, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u128>,
    /// Whether the plugin reported cleanup done.
    pub finalized: bool,
}

/// Identity of the rendered plugin.
#[derive(Debug, Serialize)]
pub struct PluginSummary {
    /// Name from `info()`.
    pub name: String,
    /// Version from `info()`.
    pub version: String,
    /// sha256 of the component.
    pub digest: String,
}

/// Runs `render` and returns the text to print.
pub fn render(args: &RenderArgs) -> anyhow::Result<String> {
    let rendered = render_value(args)?;
    Ok(match args.output {
        OutputFormat::Json => serde_json::to_string_pretty(&rendered)? + "\n",
        OutputFormat::Yaml => serde_saphyr::to_string(&rendered).context("writing YAML")?,
    })
}

/// Runs `render` and returns the structured result.
pub fn render_value(args: &RenderArgs) -> anyhow::Result<Rendered> {
    let runtime = Runtime::new(args.compile.runtime_config()?)?;
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("reading plugin {}", args.plugin.display()))?;
    let parent = single(&args.parent)?;
    let config = match &args.config {
        Some(text) => serde_json::from_str(text).context("parsing --config as JSON")?,
        None => Value::Object(Default::default()),
    };
    let input = Input {
        parent,
        observed: objects(&args.observed)?,
        related: objects(&args.related)?,
        config,
    };
    let name = args.plugin.display().to_string();
    say_compiling(&runtime, &name, &bytes);
    render_component(&runtime, &name, &bytes, &input, &crate::model::now())
        .with_context(|| format!("rendering {}", args.parent.display()))
}

/// Components from this size up take long enough to compile (seconds; a Python component of
/// 18 MB, 15 s on a busy machine) that a command says what it is doing first.
const SAY_COMPILING_FROM: usize = 2 << 20;

/// Tells stderr that `bytes` is being compiled, when it is large and not in the compiled-code
/// cache yet, so that a first `render` or `plugin install` is not mistaken for a hang.
pub(crate) fn say_compiling(runtime: &Runtime, origin: &str, bytes: &[u8]) {
    if bytes.len() >= SAY_COMPILING_FROM && runtime.needs_compile(bytes) {
        let mb = bytes.len() as f64 / 1e6;
        eprintln!(
            "compiling {origin} ({mb:.1} MB) to native code; this takes a while once, later runs load it from the compiled-code cache"
        );
    }
}

/// What a plugin is rendered with.
#[derive(Debug, Clone)]
pub struct Input {
    /// The parent object.
    pub parent: Value,
    /// The objects standing for its observed children.
    pub observed: Vec<Value>,
    /// The objects it may read through get and list.
    pub related: Vec<Value>,
    /// Its configuration.
    pub config: Value,
}

/// Loads the component `bytes` (named `name` in messages) and renders `input` with it, taking
/// `now` (RFC 3339) as the time of new condition transitions: what `render` prints, and what
/// the frozen contract corpus compares across hosts.
pub fn render_component(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    input: &Input,
    now: &str,
) -> anyhow::Result<Rendered> {
    let plugin = Plugin::load(runtime, name, bytes, Limits::default())?;
    let Input {
        parent,
        observed,
        related,
        config,
    } = input;
    let info = plugin.info();
    let (api_version, kind) = (
        parent["apiVersion"].as_str().unwrap_or(""),
        parent["kind"].as_str().unwrap_or(""),
    );
    if !info.parent.matches(api_version, kind) {
        bail!(
            "the parent is a {api_version}/{kind}, but plugin {} reconciles {}",
            info.name,
            info.parent
        );
    }
    let finalizing = info.finalizing(parent);
    let request = ReconcileRequest {
        parent: parent.clone().into(),
        children: observed.iter().map(Value::to_string).collect(),
        config: config.clone(),
        finalizing,
    };
    let outcome = plugin.reconcile(&request, Arc::new(StaticObjects::new(related.clone())))?;
    // Offline there is no CRD to read the status schema from: the plan shows every field.
    let fields = planner::StatusFields::all();
    let mut plan = planner::plan(info, &fields, parent, &outcome.desired, observed, now);
    planner::sequence(
        &mut plan,
        info,
        &fields,
        parent,
        &outcome.desired,
        observed,
        now,
    );
    Ok(Rendered {
        plugin: PluginSummary {
            name: info.name.clone(),
            version: info.version.clone(),
            digest: plugin.digest().to_owned(),
        },
        parent: crate::model::object_ref(parent),
        plan,
        conditions: outcome.desired.conditions,
        events: outcome.desired.events,
        requeue_after_ms: outcome.desired.requeue_after.map(|d| d.as_millis()),
        finalized: outcome.desired.finalized,
    })
}

/// Every object in YAML or JSON files (multi-document YAML, and `kind: List` items, flattened).
pub fn objects(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(read_objects(path)?);
    }
    Ok(all)
}

fn single(path: &Path) -> anyhow::Result<Value> {
    let mut objects = read_objects(path)?;
    match objects.len() {
        1 => Ok(objects.remove(0)),
        n => bail!(
            "{} holds {n} objects; --parent takes exactly one",
            path.display()
        ),
    }
}

fn read_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .with_context(|| format!("parsing {} as YAML", path.display()))?;
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["kind"] == "List" {
            out.extend(doc["items"].as_array().cloned().unwrap_or_default());
        } else if doc.is_object() {
            out.push(doc);
        } else {
            bail!("{} holds a document that is not an object", path.display());
        }
    }
    Ok(out)
}
