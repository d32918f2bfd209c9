//! What the lifecycle writes as the host itself (only the leader): the uninstall finalizer and
//! the status of ReconcilePlugins, and the events that say what changed.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, Recorder, Reporter};
use serde_json::{Value, json};
use tracing::warn;

use super::events;
use crate::api::{self, ReconcilePluginStatus, UNINSTALL_FINALIZER};
use crate::cache::{InformerRef, Watched};

/// Writes to ReconcilePlugins.
pub struct Writer {
    plugins: InformerRef,
    api: Api<Watched>,
    recorder: Recorder,
}

impl Writer {
    /// A writer through `client`, telling `plugins`' cache of what it wrote.
    pub fn new(client: kube::Client, plugins: InformerRef) -> Self {
        let reporter = Reporter {
            controller: "reconhost.dev/host".to_owned(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            api: Api::all_with(client.clone(), &plugins.kind().resource),
            recorder: Recorder::new(client, reporter),
            plugins,
        }
    }

    /// Adds or removes the uninstall finalizer of the ReconcilePlugin `object`.
    pub async fn finalizer(&self, object: &Value, add: bool) -> Result<(), kube::Error> {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let mut finalizers: Vec<Value> = object["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if add {
            finalizers.push(json!(UNINSTALL_FINALIZER));
        } else {
            finalizers.retain(|f| f != UNINSTALL_FINALIZER);
        }
        // The resourceVersion makes it a compare-and-swap: a finalizer another controller
        // added meanwhile is not lost.
        let patch = json!({"metadata": {
            "resourceVersion": object["metadata"]["resourceVersion"],
            "finalizers": finalizers,
        }});
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                self.plugins.observe_write(written);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 && !add => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes `wanted` as the status of `object` unless it is there already, and records an
    /// event for each change worth one.
    pub async fn status(
        &self,
        object: &Value,
        wanted: &ReconcilePluginStatus,
    ) -> Result<(), kube::Error> {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let body = serde_json::to_value(wanted).expect("a status serializes");
        if object.get("status") == Some(&body) {
            return Ok(());
        }
        let patch = json!({
            "apiVersion": format!("{}/v1alpha1", api::GROUP),
            "kind": "ReconcilePlugin",
            "metadata": {"name": name},
            "status": body,
        });
        let params = PatchParams::apply(api::HOST_FIELD_MANAGER).force();
        let written = self
            .api
            .patch_status(name, &params, &Patch::Apply(&patch))
            .await?;
        self.plugins.observe_write(written);
        let old: Option<ReconcilePluginStatus> = object
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        for event in events::transitions(old.as_ref(), wanted) {
            self.event(object, &event).await;
        }
        Ok(())
    }

    /// Records `event` on the ReconcilePlugin `object`. A failure is logged, not returned: the
    /// status says the same.
    pub async fn event(&self, object: &Value, event: &Event) {
        let meta = &object["metadata"];
        let reference = ObjectReference {
            api_version: Some(format!("{}/v1alpha1", api::GROUP)),
            kind: Some("ReconcilePlugin".to_owned()),
            name: meta["name"].as_str().map(str::to_owned),
            uid: meta["uid"].as_str().map(str::to_owned),
            ..ObjectReference::default()
        };
        if let Err(error) = self.recorder.publish(event, &reference).await {
            warn!(plugin = ?reference.name, reason = %event.reason, %error,
                  "recording an event failed");
        }
    }
}
