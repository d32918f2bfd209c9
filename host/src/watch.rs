//! `reconhost run --plugin <file> --watch`: the plugin author's loop. The file is looked at
//! twice a second; when its bytes change, the new component is loaded and swapped in through the
//! same path an upgraded ReconcilePlugin takes, so what an author sees is what a cluster will
//! do. A file that does not load (a half-written build, a compile error) is reported and the
//! running version keeps serving.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::{info, warn};

use crate::controller::Spec;
use crate::controller::workers::Stop;
use crate::runtime::{Limits, Runtime};
use crate::selector::Selector;
use crate::source::file;
use crate::supervisor::Supervisor;

/// How often the file is looked at.
const POLL: Duration = Duration::from_millis(500);

/// What the static mode's flags decide for every `--plugin` file.
#[derive(Clone)]
pub struct Settings {
    /// Parents one plugin may reconcile at once.
    pub concurrency: usize,
    /// The runtime limits of every call.
    pub limits: Limits,
    /// The parents reconciled (`--parent-selector`).
    pub parent_selector: Selector,
}

/// Reloads `path` into `owner`'s controller whenever its content changes, until `stop`.
pub async fn reload_on_change(
    path: PathBuf,
    owner: String,
    runtime: Runtime,
    supervisor: Arc<Supervisor>,
    settings: Settings,
    mut stop: Stop,
) {
    let mut seen = stamp(&path);
    let mut digest = file::read(&path).ok().map(|(_, digest)| digest);
    loop {
        tokio::select! {
            () = stop.stopped() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        let now = stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        let Ok((bytes, new)) = file::read(&path) else {
            continue; // being replaced; the next look sees the new file
        };
        if digest.as_deref() == Some(new.as_str()) {
            continue;
        }
        info!(file = %path.display(), digest = %&new[..12], "plugin file changed; reloading");
        // The bytes hashed are the bytes loaded: the file may change again meanwhile.
        let loaded = match file::load_bytes(&runtime, &path, bytes, settings.limits.clone()).await {
            Ok(plugin) => plugin,
            Err(error) => {
                warn!(file = %path.display(), error = format!("{error:#}"), "the new plugin does not load; the running version keeps serving");
                continue;
            }
        };
        let spec = Spec {
            plugin: loaded,
            config: serde_json::json!({}),
            concurrency: settings.concurrency,
            identity: None,
            parent_selector: settings.parent_selector.clone(),
            parent_namespaces: None,
            resync: None,
            ignore_parent_status: false,
            adopt: None,
            decorator: None,
        };
        match supervisor.apply(&owner, spec).await {
            Ok(applied) => {
                digest = Some(new);
                info!(file = %path.display(), ?applied, "plugin reloaded");
            }
            Err(error) => {
                warn!(file = %path.display(), %error, "the new plugin was not swapped in; the running version keeps serving");
            }
        }
    }
}

/// Size and modification time: a cheap change check before reading the file.
fn stamp(path: &PathBuf) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}
