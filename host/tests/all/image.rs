//! The container image `make image` writes: its layout as skopeo and umoci read it, the same
//! image built from deploy/image/Containerfile by buildah, and the image run by podman (runc) the
//! way a kubelet would run the chart's pod: read-only root, no capabilities, uid 65532, the
//! chart's ServiceAccount token where a pod has it, the chart's arguments and RBAC. There is no
//! kubelet here, so podman stands in for it and the host network for the pod's.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::chart::{chart_dir, clear_policy, find, helm, kubectl, must, objects, output, root};
use common::image::{
    Container, TAG, config, image_dir, needs_loader, reference, tool, tree, unpack,
};
use common::plugins::{INSTALL, cond, exclusive, has, reconcile_plugins};
use common::{CONVERGE, World, controlled_by, get, plugin};
use kube::api::DeleteParams;
use reconhost_tests::host::{free_ports, http_get};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn image_should_hold_a_static_nonroot_host_and_be_reproducible() {
    let dir = image_dir();
    let layout = dir.join("oci");
    let image = reference(&layout, TAG);
    let config = config(&image);
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let run = &config["config"];
    assert_eq!(run["User"], "65532:65532", "runs as nonroot");
    assert_eq!(strings(&run["Entrypoint"]), ["/reconhost"]);
    assert_eq!(strings(&run["Cmd"]), ["run"]);
    let env = strings(&run["Env"]);
    assert!(
        env.contains(&"RECONHOST_CACHE=/var/cache/reconhost".to_owned()),
        "{env:?}"
    );
    assert!(
        env.iter().any(|e| e.starts_with("SSL_CERT_FILE=")),
        "{env:?}"
    );

    let scratch = tempfile::tempdir().unwrap();
    let rootfs = unpack(&image, scratch.path());
    let files = tree(&rootfs);
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "etc",
            "etc/group",
            "etc/passwd",
            "etc/ssl",
            "etc/ssl/certs",
            "etc/ssl/certs/ca-certificates.crt",
            "kubectl-reconhost",
            "reconhost",
            "tmp",
            "var",
            "var/cache",
            "var/cache/reconhost",
        ],
        "the image holds the host and what it needs, nothing else"
    );
    assert_eq!(files["reconhost"].mode, 0o755);
    // The kubectl plugin is the host binary under another name (it answers to argv[0]), on
    // the image's PATH (/).
    assert_eq!(files["kubectl-reconhost"].kind, "symlink");
    assert_eq!(
        std::fs::read_link(rootfs.join("kubectl-reconhost")).unwrap(),
        Path::new("reconhost")
    );
    assert_eq!(files["tmp"].mode, 0o1777, "a writable /tmp");
    assert_eq!(files["var/cache/reconhost"].mode, 0o1777);
    let binary = std::fs::read(rootfs.join("reconhost")).unwrap();
    assert!(
        !needs_loader(&binary),
        "the host must be statically linked: there is no libc in the image"
    );
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let bundle = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(
        bundle.matches("BEGIN CERTIFICATE").count() > 10,
        "trust roots for HTTPS registries"
    );

    // The same inputs give the same image, byte for byte: the index names the same digest.
    let again = scratch.path().join("again");
    let script = root().join("scripts/mkimage.py").display().to_string();
    let written = std::process::Command::new("python3")
        .args([
            script.as_str(),
            &rootfs.join("reconhost").display().to_string(),
            &rootfs
                .join("etc/ssl/certs/ca-certificates.crt")
                .display()
                .to_string(),
            &again.display().to_string(),
            TAG,
        ])
        .env("RECONHOST_VERSION", env!("CARGO_PKG_VERSION"))
        .output()
        .expect("running scripts/mkimage.py");
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(again.join("index.json")).unwrap(),
        std::fs::read_to_string(layout.join("index.json")).unwrap(),
        "rebuilding from the same binary gave another digest"
    );
}

#[test]
fn the_containerfile_should_build_the_same_image() {
    let dir = image_dir();
    let ours = reference(&dir.join("oci"), TAG);
    let name = format!("localhost/reconhost-containerfile:{}", std::process::id());
    let containerfile = root()
        .join("deploy/image/Containerfile")
        .display()
        .to_string();
    let context = dir.join("context").display().to_string();
    must(
        &tool("buildah"),
        &[
            "build",
            "--quiet",
            "--timestamp",
            "0",
            "-f",
            &containerfile,
            "-t",
            &name,
            &context,
        ],
        None,
    );
    let scratch = tempfile::tempdir().unwrap();
    let built = reference(&scratch.path().join("built"), "image");
    let pushed = output(&tool("buildah"), &["push", "--quiet", &name, &built], None);
    let _ = output(&tool("buildah"), &["rmi", &name], None);
    pushed.unwrap_or_else(|e| panic!("{e}"));

    let (a, b) = (config(&ours), config(&built));
    for field in ["os", "architecture"] {
        assert_eq!(a[field], b[field], "{field}");
    }
    for field in ["User", "Entrypoint", "Cmd", "Env"] {
        assert_eq!(a["config"][field], b["config"][field], "config.{field}");
    }
    let ours = tree(&unpack(&ours, &scratch.path().join("ours")));
    let theirs = tree(&unpack(&built, &scratch.path().join("theirs")));
    assert_eq!(
        ours, theirs,
        "the Containerfile's image has other files or modes"
    );
}

/// The API server's address and CA, from the administrator's kubeconfig.
fn api_server(world: &World) -> (String, PathBuf) {
    let path = world.cluster.kubeconfig();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
    let ca = cluster.certificate_authority.as_ref().expect("a CA file");
    (cluster.server.clone().unwrap(), PathBuf::from(ca))
}

/// What a kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount.
fn service_account_volume(dir: &Path, token: &str, ca: &Path, namespace: &str) {
    std::fs::create_dir_all(dir).unwrap();
    // A kubelet writes the token without a newline; a trailing one would break the header.
    std::fs::write(dir.join("token"), token.trim()).unwrap();
    std::fs::copy(ca, dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("namespace"), namespace).unwrap();
}

/// kubectl with nothing but the chart ServiceAccount's token: what the host itself may do.
fn kubectl_as(world: &World, token: &str, args: &[&str]) -> Result<String, String> {
    let (server, ca) = api_server(world);
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "host",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "host", "user": {"token": token.trim()}}],
        "contexts": [{"name": "host", "context": {"cluster": "c", "user": "host"}}],
    });
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), config.to_string()).unwrap();
    let kubectl = reconhost_tests::binaries::Binaries::locate()
        .unwrap()
        .kubectl;
    let path = file.path().display().to_string();
    let mut all = vec!["--kubeconfig", &path];
    all.extend_from_slice(args);
    output(&kubectl, &all, None)
}

/// The (type, reason) of the events on a ReconcilePlugin (cluster-scoped: they are in `default`).
async fn rp_events(world: &World, name: &str) -> Vec<(String, String)> {
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        world.client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    let list = api.list(&Default::default()).await.expect("listing events");
    list.items
        .into_iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .filter(|e| e["regarding"]["kind"] == "ReconcilePlugin" && e["regarding"]["name"] == name)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_owned(),
                e["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Removes what the test made outside its namespace, even when it fails.
struct Cleanup<'a> {
    world: &'a World,
    release: String,
    namespaces: Vec<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = helm(
            self.world,
            &["uninstall", &self.release, "-n", &self.world.namespace],
        );
        for namespace in &self.namespaces {
            let _ = kubectl(
                self.world,
                &["delete", "namespace", namespace, "--wait=false"],
                None,
            );
        }
        let _ = kubectl(
            self.world,
            &[
                "delete",
                "clusterrole,clusterrolebinding",
                "-l",
                "reconhost.dev/plugin=webapp",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

#[tokio::test]
async fn the_image_should_run_as_the_charts_service_account_and_reconcile() {
    let world = World::new("image").await;
    let _suite = exclusive(&world.client).await;
    clear_policy(&world.client).await;
    // What the host may read must be the chart's and this plugin's alone: roles an earlier suite
    // left for the aggregation would widen it.
    kubectl(
        &world,
        &[
            "delete",
            "clusterrole",
            "-l",
            "reconhost.dev/aggregate-to-host=true",
            "--ignore-not-found",
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let release = format!("rh-{}", world.namespace.rsplit('-').next().unwrap());
    let fullname = format!("{release}-reconhost");
    let plugins_ns = format!("{}-plugins", world.namespace);
    let host_user = format!("system:serviceaccount:{}:{fullname}", world.namespace);
    let cleanup = Cleanup {
        world: &world,
        release: release.clone(),
        namespaces: vec![plugins_ns.clone()],
    };

    // The chart, without replicas (no kubelet would run them): its RBAC, its arguments.
    let chart = chart_dir().display().to_string();
    let sets = [
        "replicaCount=0".to_owned(),
        format!("pluginNamespaces={{{plugins_ns}}}"),
        format!("watchNamespace={}", world.namespace),
    ];
    let mut args = vec!["install", &release, &chart, "--namespace", &world.namespace];
    for set in &sets {
        args.extend(["--set", set]);
    }
    helm(&world, &args).unwrap_or_else(|e| panic!("{e}"));
    let manifest = helm(
        &world,
        &["get", "manifest", &release, "-n", &world.namespace],
    )
    .unwrap();
    let rendered = objects(&manifest);
    let pod = &find(&rendered, "Deployment", &fullname).expect("the Deployment")["spec"]["template"]
        ["spec"];
    let container = &pod["containers"][0];
    let [metrics, probes] = free_ports().unwrap();
    let host_args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(|a| {
            // The pod's ports are the host network's here; bind where nothing else is.
            if a.starts_with("--metrics-bind-address=") {
                format!("--metrics-bind-address=127.0.0.1:{metrics}")
            } else if a.starts_with("--health-probe-bind-address=") {
                format!("--health-probe-bind-address=127.0.0.1:{probes}")
            } else {
                a
            }
        })
        .collect();

    // The ServiceAccount token a kubelet would mount.
    let token = kubectl(
        &world,
        &[
            "create",
            "token",
            &fullname,
            "-n",
            &world.namespace,
            "--duration=1h",
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (server, ca) = api_server(&world);
    let port = server.rsplit(':').next().unwrap().to_owned();
    let scratch = tempfile::tempdir().unwrap();
    let account = scratch.path().join("serviceaccount");
    service_account_volume(&account, &token, &ca, &world.namespace);

    let mut run = vec![
        "--network=host".to_owned(),
        format!("--hostname={fullname}-pod"),
        "--read-only".to_owned(),
        "--cap-drop=ALL".to_owned(),
        "--security-opt=no-new-privileges".to_owned(),
        format!(
            "--user={}:{}",
            pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
        ),
        // Without CAP_SYS_RESOURCE runc cannot raise the default limits; a kubelet's are lower.
        "--ulimit=nofile=1024:1024".to_owned(),
        "--ulimit=nproc=4096:4096".to_owned(),
        "--env=KUBERNETES_SERVICE_HOST=127.0.0.1".to_owned(),
        format!("--env=KUBERNETES_SERVICE_PORT={port}"),
        format!(
            "--volume={}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            account.display()
        ),
    ];
    for env in container["env"].as_array().unwrap() {
        run.push(format!(
            "--env={}={}",
            env["name"].as_str().unwrap(),
            env["value"].as_str().unwrap()
        ));
    }
    // The chart's emptyDirs.
    for mount in container["volumeMounts"].as_array().unwrap() {
        run.push(format!(
            "--tmpfs={}:rw,size=256m,mode=1777",
            mount["mountPath"].as_str().unwrap()
        ));
    }
    let image = reference(&image_dir().join("oci"), TAG);
    let host = Container::start(&fullname, &run, &image, &host_args);

    eventually(
        Duration::from_secs(120),
        "the container to become ready",
        || async {
            let (status, _) = http_get(probes, "/readyz").await.ok()?;
            (status == 200).then_some(())
        },
    )
    .await;

    // A plugin uploaded while the host runs. Its ServiceAccount's RBAC goes first, the host's
    // share (the ClusterRole the chart aggregates) only later: until then the ReconcilePlugin
    // says what the host lacks, and it heals once granted.
    let reconhost = PathBuf::from(env!("CARGO_BIN_EXE_reconhost"));
    let kubeconfig = world.cluster.kubeconfig().display().to_string();
    let component = plugin("webapp").display().to_string();
    let account = format!("{plugins_ns}/webapp");
    let rbac = must(
        &reconhost,
        &[
            "plugin",
            "rbac",
            &component,
            "--service-account",
            &account,
            "--cluster-wide",
            "--allow-dangerous",
            "--kubeconfig",
            &kubeconfig,
        ],
        None,
    );
    let (host_share, plugin_share): (Vec<Value>, Vec<Value>) = objects(&rbac)
        .into_iter()
        .partition(|o| o["metadata"]["labels"]["reconhost.dev/aggregate-to-host"] == "true");
    assert_eq!(host_share.len(), 1, "{rbac}");
    let list =
        |items: Vec<Value>| json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    kubectl(&world, &["apply", "-f", "-"], Some(&list(plugin_share)))
        .unwrap_or_else(|e| panic!("{e}"));
    kubectl(
        &world,
        &["create", "serviceaccount", "webapp", "-n", &plugins_ns],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let installed = must(
        &reconhost,
        &[
            "plugin",
            "install",
            &component,
            "--configmap",
            &account,
            "--service-account",
            &account,
            "--kubeconfig",
            &kubeconfig,
        ],
        None,
    );
    let rps = reconcile_plugins(&world.client);
    let first = || async {
        let list = rps.list(&Default::default()).await.ok()?;
        serde_json::to_value(list.items.first()?).ok()
    };
    let refused = eventually(INSTALL, "Ready=False/HostForbidden", || async {
        let rp = first().await?;
        has(&rp, "Ready", "False", "HostForbidden").then_some(rp)
    })
    .await;
    let (_, _, message) = cond(&refused, "Ready");
    assert!(
        message.contains("WebApp")
            && message.contains(&host_user)
            && message.contains("aggregate-to-host"),
        "the condition names the kind, the host's identity and the fix: {message}"
    );
    let rp_name = refused["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(installed.contains(&rp_name), "{installed}");
    kubectl(&world, &["apply", "-f", "-"], Some(&list(host_share)))
        .unwrap_or_else(|e| panic!("{e}"));
    eventually(
        INSTALL,
        "the ReconcilePlugin to be Ready once the host may watch",
        || async {
            let rp = first().await?;
            has(&rp, "Ready", "True", "Running").then_some(())
        },
    )
    .await;
    // `kubectl reconhost` as the image ships it: the kubectl plugin's name on the image's
    // PATH, in-cluster as the host's ServiceAccount, which may read ReconcilePlugins.
    let status = host
        .exec(&["kubectl-reconhost", "status"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        status.contains(&rp_name) && status.contains("Running (True)"),
        "{status}"
    );
    let help = host
        .exec(&["kubectl-reconhost", "--help"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(help.contains("kubectl reconhost"), "{help}");
    let events = rp_events(&world, &rp_name).await;
    assert!(
        events.contains(&("Warning".to_owned(), "HostForbidden".to_owned()))
            && events.contains(&("Normal".to_owned(), "Installed".to_owned())),
        "kubectl describe rp tells the story: {events:?}"
    );

    let webapp = world.create_webapp("in-a-container", "nginx:1.27", 2).await;
    let deployment = eventually(CONVERGE, "the WebApp's Deployment", || async {
        get(&world.deployments(), "in-a-container").await
    })
    .await;
    assert!(controlled_by(&deployment, &webapp));
    assert_eq!(deployment["spec"]["replicas"], 2);

    // The write was the host's ServiceAccount acting as the plugin's.
    let plugin_user = format!("system:serviceaccount:{plugins_ns}:webapp");
    let created = world
        .cluster
        .audit_log()
        .events_in(&world.namespace)
        .unwrap()
        .into_iter()
        .find(|e| {
            e.verb != "delete"
                && e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.resource == "deployments" && o.name == "in-a-container")
        })
        .expect("the Deployment's write in the audit log");
    assert_eq!(created.user.username, host_user);
    assert_eq!(
        created.impersonated_user.map(|u| u.username).as_deref(),
        Some(plugin_user.as_str())
    );

    // The host's own authority is the chart's, no more: the API server says 403.
    assert!(
        kubectl_as(&world, &token, &["get", "reconcileplugins"]).is_ok(),
        "a positive control"
    );
    let grant = format!("--serviceaccount={}:{fullname}", world.namespace);
    for denied in [
        vec!["get", "secrets", "--all-namespaces"],
        vec![
            "create",
            "clusterrolebinding",
            "take-over",
            "--clusterrole=cluster-admin",
            &grant,
        ],
        vec![
            "get",
            "deployments",
            "-n",
            &world.namespace,
            "--as",
            &format!("system:serviceaccount:{}:default", world.namespace),
        ],
        vec!["delete", "namespace", &plugins_ns],
    ] {
        let error =
            kubectl_as(&world, &token, &denied).expect_err(&format!("{denied:?} was allowed"));
        assert!(
            error.contains("Forbidden") || error.contains("forbidden"),
            "{denied:?}: {error}"
        );
    }

    // A ReconcilePlugin naming a ServiceAccount outside the plugin namespaces: the host may not
    // act as it, and the ReconcilePlugin says so (not only the host's log).
    let outsider = "probe.test.reconhost.dev";
    let mut rp = world.reconcile_plugin(
        outsider,
        ["test.reconhost.dev/v1", "Probe"],
        &format!("sha256:{}", "0".repeat(64)),
        world.config_map_source("probe"),
    );
    rp["spec"]["serviceAccountRef"]["name"] = serde_json::json!("default");
    world.apply_plugin(&rp).await;
    let refused = eventually(CONVERGE, "Authorized=False/CannotImpersonate", || async {
        let rp = get(&reconcile_plugins(&world.client), outsider).await?;
        (has(&rp, "Authorized", "False", "CannotImpersonate")
            && has(&rp, "Ready", "False", "CannotImpersonate"))
        .then_some(rp)
    })
    .await;
    let (_, _, message) = cond(&refused, "Authorized");
    assert!(
        message.contains(&format!("{}/default", world.namespace))
            && message.contains("pluginNamespaces"),
        "{message}"
    );
    reconcile_plugins(&world.client)
        .delete(outsider, &DeleteParams::default())
        .await
        .expect("deleting the outsider");

    // SIGTERM: a clean exit that gives up the lease, as a rollout needs.
    let leases = world.api("coordination.k8s.io", "v1", "Lease", "leases");
    let lease = get(&leases, "reconhost-leader")
        .await
        .expect("the leader's Lease");
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("{fullname}-pod")),
        "{lease}"
    );
    reconcile_plugins(&world.client)
        .delete(&rp_name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        CONVERGE,
        "the host to let its ReconcilePlugin go",
        || async { get(&rps, &rp_name).await.is_none().then_some(()) },
    )
    .await;
    let events = rp_events(&world, &rp_name).await;
    assert!(
        events.contains(&("Normal".to_owned(), "Uninstalled".to_owned())),
        "{events:?}"
    );
    let code = host.stop(40);
    assert_eq!(code, 0, "{}", host.logs());
    let lease = get(&leases, "reconhost-leader").await.unwrap();
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{lease}"
    );
    let logs = host.logs();
    assert!(
        logs.lines().all(|l| l.starts_with('{')),
        "the chart asks for JSON logs: {logs}"
    );
    drop(cleanup);
}
