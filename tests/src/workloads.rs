//! The fake node that kwok keeps Ready, so pods scheduled to it report Running and Deployments
//! progress as in a cluster, without a kubelet.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::Error;

/// The fake node's name.
pub const FAKE_NODE: &str = "kwok-node-0";

/// Creates the fake node (if missing) with room for many pods.
pub async fn create_fake_node(client: &kube::Client, annotation: &str) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": FAKE_NODE,
            "annotations": {annotation: "fake"},
            "labels": {"kubernetes.io/hostname": FAKE_NODE, "type": "kwok"},
        },
    }))
    .expect("a node literal");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(source) => {
            return Err(Error::Kube {
                what: "creating the fake node".into(),
                source,
            });
        }
    }
    // The API server taints a new node not-ready; the node lifecycle controller, which is not
    // run here, would lift the taint once kwok reports the node Ready.
    nodes
        .patch(
            FAKE_NODE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await
        .map_err(|source| Error::Kube {
            what: "removing the fake node's not-ready taint".into(),
            source,
        })?;
    let capacity = json!({"cpu": "32", "memory": "256Gi", "pods": "1000"});
    let status = json!({"status": {"capacity": capacity, "allocatable": capacity}});
    nodes
        .patch_status(FAKE_NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|source| Error::Kube {
            what: "setting the fake node's capacity".into(),
            source,
        })?;
    Ok(())
}
