//! Tracing: a host started with `--otlp-endpoint` exports one OpenTelemetry trace per reconcile
//! that wrote, to the control plane's OTLP receiver, with the plugin call, each child written
//! and the status write as spans, and the API server's own spans for those writes in the same
//! trace (its tracing follows the `traceparent` the host sends). Reconciles that changed
//! nothing are not exported. A child's span names the fields a write changed; the metrics
//! point at exported traces (exemplars). At a sampling ratio of 0 nothing is exported, and
//! the log lines `RUST_LOG` asks for still show.

use crate::common;

use common::load::generators;
use common::{CONVERGE, World, condition, get, reconciles};
use kube::api::{Api, DynamicObject};
use reconhost_tests::host::Host;
use reconhost_tests::otlp::SpanRecord;
use reconhost_tests::support::eventually;
use serde_json::json;

/// A host exporting traces to the control plane's receiver, serving `plugin`, with `args`
/// more. Batches leave every 100 ms instead of every 5 s, so the tests do not wait on them.
async fn traced_host(world: &World, plugin: &str, args: &[&str]) -> Host {
    let endpoint = world.cluster.otlp_endpoint().expect("the trace receiver");
    let mut all = vec!["--otlp-endpoint", endpoint.as_str()];
    all.extend(args);
    world
        .host_with(&[plugin], &[("OTEL_BSP_SCHEDULE_DELAY", "100")], &all)
        .await
}

/// A ConfigMapGenerator `name` whose content is `{"round": "0"}`, once it has converged.
async fn generator(world: &World, api: &Api<DynamicObject>, name: &str) {
    world
        .create(
            api,
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "ConfigMapGenerator",
                   "metadata": {"name": name}, "spec": {"content": {"round": "0"}}}),
        )
        .await;
    converged(api, name).await;
}

/// Waits until `name` is Synced at its current generation.
async fn converged(api: &Api<DynamicObject>, name: &str) {
    eventually(
        CONVERGE,
        &format!("{name} synced at its generation"),
        || async {
            let object = get(api, name).await?;
            let synced = condition(&object, "Synced")?;
            let current =
                object["status"]["observedGeneration"] == object["metadata"]["generation"];
            (current && synced["status"] == "True").then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn every_reconcile_that_wrote_should_be_one_trace_with_the_api_servers_spans_in_it() {
    let world = World::new("traces").await;
    let host = traced_host(&world, "configmap-generator", &[]).await;
    let generators = generators(&world);
    let name = "traced";
    generator(&world, &generators, name).await;
    // A change to nothing the plugin reads: reconciled, nothing to write.
    world
        .merge(
            &generators,
            name,
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    for round in ["1", "2"] {
        world
            .merge(
                &generators,
                name,
                json!({"spec": {"content": {"round": round}}}),
            )
            .await;
        converged(&generators, name).await;
    }

    let parent = format!("{}/{name}", world.namespace);
    let is_root = |s: &SpanRecord| {
        s.service == "reconhost" && s.name == "reconcile" && s.attributes["parent"] == parent
    };
    // The create and the two rounds each wrote the ConfigMap and the status; the API server
    // exports its spans for those writes in batches of its own, so they may come later.
    let spans = eventually(CONVERGE, "three traces of writing reconciles", || async {
        let spans = world.cluster.spans();
        let roots: Vec<&SpanRecord> = spans.iter().filter(|s| is_root(s)).collect();
        let complete = roots.len() >= 3
            && roots.iter().all(|root| {
                spans
                    .iter()
                    .any(|s| s.trace_id == root.trace_id && s.service != "reconhost")
            });
        complete.then_some(spans)
    })
    .await;
    let roots: Vec<&SpanRecord> = spans.iter().filter(|s| is_root(s)).collect();
    let all_reconciles = reconciles(&host, "configmap-generator").await;
    assert!(
        (roots.len() as f64) < all_reconciles,
        "{} reconciles, {} exported: the ones that wrote nothing should not be",
        all_reconciles,
        roots.len()
    );
    for root in &roots {
        assert!(
            matches!(
                root.attributes.get("outcome").map(String::as_str),
                Some("changed" | "failed")
            ),
            "an exported reconcile that neither wrote nor failed: {root:?}"
        );
        let trace: Vec<&SpanRecord> = spans
            .iter()
            .filter(|s| s.trace_id == root.trace_id)
            .collect();
        let ours = |name: &str| {
            trace
                .iter()
                .filter(|s| s.service == "reconhost" && s.name == name)
                .copied()
                .collect::<Vec<_>>()
        };
        // What caused it: a `trigger` span the root links to, exported with it, and the wait
        // in the queue as the root's first child.
        assert_eq!(root.links.len(), 1, "{root:?}");
        let cause = spans
            .iter()
            .find(|s| s.span_id == root.links[0].1 && s.name == "trigger")
            .unwrap_or_else(|| panic!("the cause of {root:?} was not exported"));
        let known = [
            "watch",
            "child",
            "dependency",
            "resync",
            "requeue-after",
            "retry",
            "route",
            "initial",
        ];
        assert!(
            known.contains(&cause.attributes["trigger"].as_str()),
            "{cause:?}"
        );
        let queue = ours("queue");
        assert_eq!(queue.len(), 1, "{trace:#?}");
        assert_eq!(queue[0].parent_span_id, root.span_id);
        let call = ours("plugin.call");
        assert_eq!(call.len(), 1, "{trace:#?}");
        assert_eq!(call[0].parent_span_id, root.span_id);
        // The root names the code by its short digest, the call by the whole one.
        assert!(
            call[0].attributes["digest"].starts_with(&root.attributes["digest"]),
            "{call:?} {root:?}"
        );
        assert!(
            call[0].attributes.contains_key("memory_peak_bytes"),
            "{call:?}"
        );
        let answered: u64 = call[0].attributes["response_bytes"].parse().unwrap_or(0);
        assert!(
            answered > 0,
            "the size of what the plugin answered: {call:?}"
        );
        let writes: Vec<&SpanRecord> = ours("child").into_iter().chain(ours("status")).collect();
        assert!(!writes.is_empty(), "{trace:#?}");
        // Each write the API server traced is a child of the host's span for it.
        let server: Vec<&SpanRecord> = trace
            .iter()
            .filter(|s| s.service != "reconhost")
            .copied()
            .collect();
        assert!(
            !server.is_empty(),
            "no span of the API server in a reconcile that wrote: {trace:#?}"
        );
        let ours_ids: Vec<&str> = trace
            .iter()
            .filter(|s| s.service == "reconhost")
            .map(|s| s.span_id.as_str())
            .collect();
        assert!(
            server
                .iter()
                .filter(|s| !trace
                    .iter()
                    .any(|t| t.span_id == s.parent_span_id && t.service != "reconhost"))
                .all(|s| ours_ids.contains(&s.parent_span_id.as_str())),
            "an API server span whose parent is not the host's: {trace:#?}"
        );
    }
    // The rounds were the parent's own watch events: named by kind, object and version.
    let watched = roots.iter().filter(|root| {
        spans.iter().any(|s| {
            s.span_id == root.links[0].1
                && s.attributes["trigger"] == "watch"
                && s.attributes["kind"] == "ConfigMapGenerator"
                && s.attributes["object"] == parent
                && !s.attributes["resource_version"].is_empty()
        })
    });
    assert!(watched.count() >= 2, "{roots:#?}");
    // Time to converge points at the trace of a reconcile that converged (an exemplar).
    let metrics = host.metrics().await.expect("the host's metrics");
    let exemplar = metrics.lines().any(|line| {
        line.starts_with("reconhost_time_to_converge_seconds_bucket")
            && roots
                .iter()
                .any(|root| line.contains(&format!("trace_id=\"{}\"", root.trace_id)))
    });
    assert!(exemplar, "no exemplar naming an exported trace:\n{metrics}");
    // And so does the time of a reconcile.
    let timed = metrics.lines().any(|line| {
        line.starts_with("controller_runtime_reconcile_time_seconds_bucket")
            && roots
                .iter()
                .any(|root| line.contains(&format!("trace_id=\"{}\"", root.trace_id)))
    });
    assert!(
        timed,
        "no reconcile time naming an exported trace:\n{metrics}"
    );
    // Each round's write names the one field it changed in the ConfigMap; the first made it.
    let child = |action: &str| -> Vec<&SpanRecord> {
        spans
            .iter()
            .filter(|s| {
                s.name == "child"
                    && s.attributes["action"] == action
                    && roots.iter().any(|root| root.trace_id == s.trace_id)
            })
            .collect()
    };
    let updated = child("Update");
    assert!(updated.len() >= 2, "{roots:#?}");
    for span in updated {
        assert_eq!(span.attributes["changed"], "data.round", "{span:?}");
        assert_eq!(span.attributes["changed_count"], "1", "{span:?}");
    }
    let created = child("Create");
    assert_eq!(created.len(), 1, "{roots:#?}");
    assert_eq!(created[0].attributes["changed"], "created");
    // The parent's record names the trace of the reconcile that last wrote it.
    let recorded = get(&generators, name).await.expect("the parent");
    let record: serde_json::Value = serde_json::from_str(
        recorded["metadata"]["annotations"]["reconhost.dev/last-reconcile"]
            .as_str()
            .expect("the host's record on the parent"),
    )
    .expect("the record is JSON");
    let traced = record["traceId"].as_str().unwrap_or("");
    assert!(
        roots.iter().any(|root| root.trace_id == traced),
        "the record's trace {traced:?} is none of the exported ones: {record}"
    );
    // The ConfigMap the traces are about holds the last round.
    let map = get(&world.config_maps(), name)
        .await
        .expect("the ConfigMap");
    assert_eq!(map["data"]["round"], "2");
}

#[tokio::test]
async fn a_childs_span_should_name_the_fields_it_changed_or_say_it_changed_nothing() {
    let world = World::new("traces-changed").await;
    let _host = traced_host(&world, "webapp", &[]).await;
    let webapps = world.webapps();
    let name = "scaled";
    world.create_webapp(name, "nginx:1.27", 1).await;
    converged(&webapps, name).await;
    world
        .merge(&webapps, name, json!({"spec": {"replicas": 3}}))
        .await;
    converged(&webapps, name).await;

    // The reconcile that scaled it wrote the Deployment and left the Service as it was.
    let parent = format!("{}/{name}", world.namespace);
    let (deployment, service) = eventually(CONVERGE, "the trace of the scaling", || async {
        let spans = world.cluster.spans();
        let ours = |s: &&SpanRecord| {
            spans.iter().any(|root| {
                root.name == "reconcile"
                    && root.attributes["parent"] == parent
                    && root.trace_id == s.trace_id
            })
        };
        let child = |trace: &str, kind: &str| {
            spans
                .iter()
                .find(|s| {
                    s.trace_id == trace
                        && s.name == "child"
                        && s.attributes["target"].starts_with(&format!("{kind} "))
                })
                .cloned()
        };
        spans
            .iter()
            .filter(ours)
            .filter(|s| s.name == "child" && s.attributes["action"] == "Update")
            .find_map(|d| {
                Some((
                    child(&d.trace_id, "Deployment")?,
                    child(&d.trace_id, "Service")?,
                ))
            })
    })
    .await;
    assert_eq!(deployment.attributes["action"], "Update", "{deployment:?}");
    assert_eq!(deployment.attributes["changed"], "spec.replicas");
    assert_eq!(deployment.attributes["changed_count"], "1");
    assert_eq!(service.attributes["action"], "Unchanged", "{service:?}");
    assert_eq!(service.attributes["changed"], "unchanged");
    assert_eq!(service.attributes["changed_count"], "0");
}

#[tokio::test]
async fn a_sampling_ratio_of_zero_should_export_no_reconcile_and_name_no_trace() {
    let world = World::new("traces-unsampled").await;
    let endpoint = world.cluster.otlp_endpoint().expect("the trace receiver");
    // A dependency's debug records, asked for: the host caps the `log` records it makes at
    // what the log filter shows, not below it.
    let host = world
        .host_with(
            &["configmap-generator"],
            &[("RUST_LOG", "warn,reconhost=info,rustls=debug")],
            &["--otlp-endpoint", &endpoint, "--trace-sampling-ratio", "0"],
        )
        .await;
    let generators = generators(&world);
    let name = "unsampled";
    generator(&world, &generators, name).await;
    world
        .merge(
            &generators,
            name,
            json!({"spec": {"content": {"round": "1"}}}),
        )
        .await;
    converged(&generators, name).await;
    let rustls = host
        .logs()
        .into_iter()
        .filter(|l| {
            l["level"] == "DEBUG"
                && l["target"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("rustls"))
        })
        .count();
    assert!(
        rustls > 0,
        "no rustls debug line in {}",
        host.log_file().display()
    );
    // A graceful stop exports whatever is still batched.
    host.stop(std::time::Duration::from_secs(10));

    let parent = format!("{}/{name}", world.namespace);
    let exported: Vec<SpanRecord> = world
        .cluster
        .spans()
        .into_iter()
        .filter(|s| s.service == "reconhost" && s.attributes.get("parent") == Some(&parent))
        .collect();
    assert!(exported.is_empty(), "{exported:#?}");
    let recorded = get(&generators, name).await.expect("the parent");
    let record: serde_json::Value = serde_json::from_str(
        recorded["metadata"]["annotations"]["reconhost.dev/last-reconcile"]
            .as_str()
            .expect("the host's record on the parent"),
    )
    .expect("the record is JSON");
    assert!(record["traceId"].is_null(), "{record}");
    let map = get(&world.config_maps(), name)
        .await
        .expect("the ConfigMap");
    assert_eq!(map["data"]["round"], "1");
}
