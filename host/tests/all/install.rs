//! The chart (deploy/charts/reconhost) and the plain manifests rendered from it, on the real
//! control plane: helm lints it, the API server accepts what it renders, it installs, upgrades
//! and uninstalls, and the host it describes holds no more authority than its job needs.

use crate::common;

use common::chart::{
    POLICY, chart_dir, clear_policy, cluster_api, find, helm, helm_binary, kubectl, must, objects,
    root, template,
};
use common::plugins::exclusive;
use common::{CONVERGE, World, get, plugin};
use kube::api::{Api, DeleteParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

/// Every rule of every Role and ClusterRole among `objects`, with the role's kind and name.
fn rules(objects: &[Value]) -> Vec<(String, Value)> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .flat_map(|o| {
            let owner = format!(
                "{} {}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            o["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |r| (owner.clone(), r))
        })
        .collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn chart_should_lint_and_render_a_hardened_least_privilege_install() {
    let chart = chart_dir().display().to_string();
    let lint = must(&helm_binary(), &["lint", "--strict", &chart], None);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    let rendered = objects(&template("rh", "reconhost-system", &[]).unwrap());
    let deployment = find(&rendered, "Deployment", "rh-reconhost").expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["serviceAccountName"], "rh-reconhost");
    let container = &pod["containers"][0];
    let hardening = &container["securityContext"];
    assert_eq!(hardening["readOnlyRootFilesystem"], true);
    assert_eq!(hardening["allowPrivilegeEscalation"], false);
    assert_eq!(hardening["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        container["image"], "reconhost:0.1.0",
        "the tag is the appVersion"
    );
    let args = strings(&container["args"]);
    // Two replicas by default: they share the parents in a ring named after the release.
    for flag in [
        "run",
        "--sharding",
        "--sharding-ring=rh-reconhost",
        "--leader-election-namespace=reconhost-system",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
    ] {
        assert!(args.contains(&flag), "{flag} missing from {args:?}");
    }
    // The compiled-code cache is where a volume is mounted, and the root stays read-only.
    let env = container["env"].as_array().unwrap();
    let cache = env
        .iter()
        .find(|e| e["name"] == "RECONHOST_CACHE")
        .expect("RECONHOST_CACHE");
    let mounts = container["volumeMounts"].as_array().unwrap();
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"] == cache["value"])
        .expect("a volume at the cache directory");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "{volume}");
    assert!(mounts.iter().any(|m| m["mountPath"] == "/tmp"));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "probes");
    assert!(container["resources"]["limits"]["memory"].is_string());

    // Least privilege: no wildcard anywhere; impersonation only in the plugin namespaces;
    // Secrets readable only there, one at a time; nothing written but the host's own kinds.
    let all = rules(&rendered);
    assert!(!all.is_empty());
    for (owner, rule) in &all {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(
                !strings(&rule[field]).contains(&"*"),
                "{owner} has a wildcard: {rule}"
            );
        }
        let resources = strings(&rule["resources"]);
        let verbs = strings(&rule["verbs"]);
        if verbs.contains(&"impersonate") || resources.contains(&"secrets") {
            assert!(
                owner.starts_with("Role ") && !verbs.contains(&"list"),
                "{owner} grants {rule} beyond the plugin namespaces"
            );
        }
        if owner.starts_with("ClusterRole ") {
            let writes = verbs
                .iter()
                .any(|v| ["create", "update", "patch", "delete"].contains(v));
            assert!(
                !writes
                    || resources.iter().all(|r| r.starts_with("reconcileplugins")
                        || *r == "events"
                        || *r == "subjectaccessreviews"),
                "{owner} writes more than the host's own objects: {rule}"
            );
        }
    }
    let plugins_role =
        find(&rendered, "Role", "rh-reconhost-plugins").expect("a plugin-namespace Role");
    assert_eq!(plugins_role["metadata"]["namespace"], "reconhost-plugins");
    let aggregated = find(&rendered, "ClusterRole", "rh-reconhost-plugin-kinds").unwrap();
    assert_eq!(
        aggregated["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["reconhost.dev/aggregate-to-host"],
        "true"
    );
    let namespace = find(&rendered, "Namespace", "reconhost-plugins").unwrap();
    assert_eq!(
        namespace["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
        "uninstalling the host must not delete the plugins' ServiceAccounts and sources"
    );
    assert!(!args.contains(&"--leader-elect"), "sharding, not a leader");
    let lease_role = find(&rendered, "Role", "rh-reconhost-leader-election").unwrap();
    assert_eq!(
        strings(&lease_role["rules"][0]["resources"]),
        ["leases"],
        "the leader-election Role is about Leases only"
    );
    assert_eq!(
        strings(&lease_role["rules"][0]["verbs"]),
        ["get", "list", "watch", "create", "update", "delete"],
        "members list and watch the ring and delete their own Lease on leaving"
    );
    // Without sharding, the replicas elect a leader.
    let elected =
        objects(&template("rh", "reconhost-system", &["sharding.enabled=false"]).unwrap());
    let args = strings(
        &find(&elected, "Deployment", "rh-reconhost").unwrap()["spec"]["template"]["spec"]
            ["containers"][0]["args"],
    )
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    for flag in [
        "--leader-elect",
        "--leader-election-namespace=reconhost-system",
        "--leader-election-id=reconhost-leader",
    ] {
        assert!(
            args.contains(&flag.to_owned()),
            "{flag} missing from {args:?}"
        );
    }
    assert!(!args.contains(&"--sharding".to_owned()));
    let lease_role = find(&elected, "Role", "rh-reconhost-leader-election").unwrap();
    assert_eq!(
        strings(&lease_role["rules"][0]["verbs"]),
        ["get", "create", "update"]
    );
    assert!(find(&rendered, "PodDisruptionBudget", "rh-reconhost").is_some());
    assert!(find(&rendered, "Service", "rh-reconhost-metrics").is_some());
    assert!(find(&rendered, "ServiceMonitor", "rh-reconhost").is_none());
    assert!(find(&rendered, "NetworkPolicy", "rh-reconhost").is_none());

    // The policy is the one deploy/policies/ ships for installs without the chart.
    let shipped = objects(
        &std::fs::read_to_string(
            root().join("deploy/policies/reconcileplugin-serviceaccount.yaml"),
        )
        .unwrap(),
    );
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert_eq!(
            find(&rendered, kind, POLICY).unwrap()["spec"],
            find(&shipped, kind, POLICY).unwrap()["spec"],
            "the chart's {kind} differs from deploy/policies/"
        );
    }

    // Options: one replica needs no budget; a monitor, a network policy, one namespace.
    let options = objects(
        &template(
            "rh",
            "reconhost-system",
            &[
                "replicaCount=1",
                "serviceMonitor.enabled=true",
                "networkPolicy.enabled=true",
                "watchNamespace=team-a",
                "insecureRegistries={registry.local:5000}",
                "leaderElection.enabled=false",
            ],
        )
        .unwrap(),
    );
    assert!(find(&options, "PodDisruptionBudget", "rh-reconhost").is_none());
    assert!(find(&options, "Role", "rh-reconhost-leader-election").is_none());
    let monitor = find(&options, "ServiceMonitor", "rh-reconhost").unwrap();
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let policy = find(&options, "NetworkPolicy", "rh-reconhost").unwrap();
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "metrics");
    let args = strings(
        &find(&options, "Deployment", "rh-reconhost").unwrap()["spec"]["template"]["spec"]
            ["containers"][0]["args"],
    )
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    assert!(args.contains(&"--namespace=team-a".to_owned()));
    assert!(args.contains(&"--insecure-registry=registry.local:5000".to_owned()));
    assert!(!args.iter().any(|a| a.starts_with("--leader-elect")));
    assert!(
        !args.contains(&"--sharding".to_owned()),
        "one replica shares with nobody"
    );
}

#[test]
fn bad_values_should_be_refused_naming_the_value() {
    for (set, named) in [
        ("replicaCount=-1", "replicaCount"),
        ("host.syncPeriod=ten-hours", "syncPeriod"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("pluginNamespaces=null", "pluginNamespaces"),
        ("pluginNamespace=typo", "pluginNamespace"),
        ("metrics.port=70000", "port"),
    ] {
        let error = template("rh", "reconhost-system", &[set]).expect_err(set);
        assert!(
            error.contains(named) && error.contains("schema"),
            "--set {set}: {error}"
        );
    }
}

#[test]
fn plain_manifests_should_be_the_chart_rendered() {
    let script = root().join("scripts/manifests.sh").display().to_string();
    let helm = helm_binary().display().to_string();
    let generated = std::process::Command::new("bash")
        .arg(&script)
        .env("HELM", &helm)
        .output()
        .expect("running scripts/manifests.sh");
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let checked_in = std::fs::read(root().join("deploy/manifests/reconhost.yaml")).unwrap();
    assert!(
        generated.stdout == checked_in,
        "deploy/manifests/reconhost.yaml differs from the chart: run `make manifests`"
    );
    let objects = objects(&String::from_utf8(checked_in).unwrap());
    assert_eq!(objects[0]["kind"], "Namespace");
    assert_eq!(objects[0]["metadata"]["name"], "reconhost-system");
    assert!(
        find(
            &objects,
            "CustomResourceDefinition",
            "reconcileplugins.reconhost.dev"
        )
        .is_some(),
        "kubectl users get the CRD in the same file"
    );
}

#[tokio::test]
async fn the_api_server_should_accept_everything_the_chart_and_manifests_hold() {
    let world = World::new("chart-dry").await;
    // The plain manifests hold the cluster's one admission policy, which the helm tests delete
    // and recreate: a dry run that read it as present and then found it gone would fail.
    let _suite = exclusive(&world.client).await;
    // Server-side dry runs do not create the namespaces the objects go in; these do.
    let created = ensure_namespaces(&world, &["reconhost-system", "reconhost-plugins"]).await;
    let plain = root()
        .join("deploy/manifests/reconhost.yaml")
        .display()
        .to_string();
    let applied = kubectl(&world, &["apply", "--dry-run=server", "-f", &plain], None);
    let options = template(
        "rh",
        &world.namespace,
        &[
            &format!("pluginNamespaces={{{}}}", world.namespace),
            "createPluginNamespaces=false",
            "networkPolicy.enabled=true",
            &format!("watchNamespace={}", world.namespace),
        ],
    )
    .unwrap();
    let applied_options = kubectl(
        &world,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&options),
    );
    delete_namespaces(&world, &created).await;
    let applied = applied.unwrap_or_else(|e| panic!("{e}"));
    for object in [
        "namespace/reconhost-system",
        "customresourcedefinition.apiextensions.k8s.io/reconcileplugins.reconhost.dev",
        "serviceaccount/reconhost",
        "clusterrole.rbac.authorization.k8s.io/reconhost-plugin-kinds",
        "role.rbac.authorization.k8s.io/reconhost-plugins",
        "role.rbac.authorization.k8s.io/reconhost-leader-election",
        "deployment.apps/reconhost",
        "service/reconhost-metrics",
        "poddisruptionbudget.policy/reconhost",
        "validatingadmissionpolicy.admissionregistration.k8s.io/reconcileplugins.reconhost.dev-serviceaccount",
    ] {
        assert!(
            applied
                .lines()
                .any(|l| l.starts_with(&format!("{object} "))),
            "{object} not in:\n{applied}"
        );
    }
    assert!(applied.contains("(server dry run)"));
    let applied_options = applied_options.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        applied_options
            .contains("networkpolicy.networking.k8s.io/rh-reconhost created (server dry run)"),
        "{applied_options}"
    );
}

#[tokio::test]
async fn helm_should_install_upgrade_and_uninstall_the_host() {
    let world = World::new("chart").await;
    let _suite = exclusive(&world.client).await;
    clear_policy(&world.client).await;
    let release = format!("rh-{}", world.namespace.rsplit('-').next().unwrap());
    let fullname = format!("{release}-reconhost");
    let plugins_ns = format!("{}-plugins", world.namespace);
    let chart = chart_dir().display().to_string();
    let set_ns = format!("pluginNamespaces={{{plugins_ns}}}");
    let installed = helm(
        &world,
        &[
            "install",
            &release,
            &chart,
            "--namespace",
            &world.namespace,
            "--set",
            &set_ns,
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert!(
        installed.contains("reconhost plugin install"),
        "NOTES.txt says what to do next: {installed}"
    );

    let deployments = world.deployments();
    let deployment = get(&deployments, &fullname).await.expect("the Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let budgets = world.api(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    );
    assert!(
        get(&budgets, &fullname).await.is_some(),
        "two replicas get a budget"
    );
    let roles_in_plugins = Api::<kube::api::DynamicObject>::namespaced_with(
        world.client.clone(),
        &plugins_ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "Role"),
            "roles",
        ),
    );
    assert!(
        get(&roles_in_plugins, &format!("{fullname}-plugins"))
            .await
            .is_some()
    );
    let cluster_roles = cluster_api(
        &world.client,
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
    );
    assert!(get(&cluster_roles, &fullname).await.is_some());
    let policies = cluster_api(
        &world.client,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    );
    assert!(get(&policies, POLICY).await.is_some());

    // What a plugin's installer adds reaches the host through the aggregated ClusterRole.
    let rbac = must(
        &std::path::PathBuf::from(env!("CARGO_BIN_EXE_reconhost")),
        &[
            "plugin",
            "rbac",
            &plugin("webapp").display().to_string(),
            "--service-account",
            &format!("{plugins_ns}/webapp"),
            "--cluster-wide",
            "--allow-dangerous",
            "--kubeconfig",
            &world.cluster.kubeconfig().display().to_string(),
        ],
        None,
    );
    kubectl(&world, &["apply", "-f", "-"], Some(&rbac)).unwrap_or_else(|e| panic!("{e}"));
    let aggregated = format!("{fullname}-plugin-kinds");
    eventually(
        CONVERGE,
        "the host's role to collect the plugin's kinds",
        || async {
            let role = get(&cluster_roles, &aggregated).await?;
            let rules = role["rules"].as_array()?;
            rules
                .iter()
                .any(|r| {
                    strings(&r["resources"]).contains(&"webapps")
                        && strings(&r["verbs"]).contains(&"watch")
                })
                .then_some(())
        },
    )
    .await;
    let role = get(&cluster_roles, &aggregated).await.unwrap();
    for (_, rule) in rules(&[role]) {
        assert!(
            !strings(&rule["verbs"]).contains(&"create"),
            "the host watches the plugin's kinds; the plugin's ServiceAccount writes them: {rule}"
        );
    }

    let upgraded = helm(
        &world,
        &[
            "upgrade",
            &release,
            &chart,
            "--namespace",
            &world.namespace,
            "--reuse-values",
            "--set",
            "replicaCount=1",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    let deployment = get(&deployments, &fullname).await.unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(
        get(&budgets, &fullname).await.is_none(),
        "one replica needs no budget"
    );

    let removed = helm(
        &world,
        &["uninstall", &release, "--namespace", &world.namespace],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(removed.contains("uninstalled"), "{removed}");
    assert!(get(&deployments, &fullname).await.is_none());
    assert!(get(&cluster_roles, &fullname).await.is_none());
    assert!(get(&policies, POLICY).await.is_none());
    let namespaces = cluster_api(&world.client, "v1", "Namespace", "namespaces");
    assert!(
        get(&namespaces, &plugins_ns).await.is_some(),
        "the plugin namespace stays"
    );
    let crds = cluster_api(
        &world.client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    assert!(
        get(&crds, "reconcileplugins.reconhost.dev").await.is_some(),
        "helm never deletes CRDs (and the ReconcilePlugins with them)"
    );
    kubectl(&world, &["delete", "-f", "-"], Some(&rbac)).unwrap_or_else(|e| panic!("{e}"));
    delete_namespaces(&world, &[plugins_ns]).await;
}

#[tokio::test]
async fn helm_should_install_where_the_plugin_namespace_and_the_policy_exist_already() {
    let world = World::new("chart-over").await;
    let _suite = exclusive(&world.client).await;
    clear_policy(&world.client).await;
    let suffix = world.namespace.rsplit('-').next().unwrap().to_owned();
    let plugins_ns = format!("{}-plugins", world.namespace);
    let chart = chart_dir().display().to_string();
    let set_ns = format!("pluginNamespaces={{{plugins_ns}}}");
    let install = |release: &str| {
        helm(
            &world,
            &[
                "install",
                release,
                &chart,
                "--namespace",
                &world.namespace,
                "--set",
                &set_ns,
            ],
        )
    };
    let uninstall = |release: &str| {
        helm(
            &world,
            &["uninstall", release, "--namespace", &world.namespace],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let policies = cluster_api(
        &world.client,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    );
    let namespaces = cluster_api(&world.client, "v1", "Namespace", "namespaces");

    // As `make run` leaves the cluster: the plugin namespace and the policy, made by kubectl.
    ensure_namespaces(&world, &[&plugins_ns]).await;
    let policy_file = root()
        .join("deploy/policies/reconcileplugin-serviceaccount.yaml")
        .display()
        .to_string();
    kubectl(
        &world,
        &["apply", "--server-side", "-f", &policy_file],
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let first = format!("rh-{suffix}");
    let installed = install(&first).unwrap_or_else(|e| panic!("{e}"));
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert!(
        installed.contains("existed before this release and were kept")
            && installed.contains(&format!("Namespace {plugins_ns}"))
            && installed.contains(&format!("ValidatingAdmissionPolicy {POLICY}")),
        "NOTES.txt says what it left alone: {installed}"
    );
    uninstall(&first);
    assert!(
        get(&policies, POLICY).await.is_some(),
        "the policy the release did not make stays"
    );

    // After an earlier release: it kept the plugin namespace it made, which the next release,
    // of another name, finds.
    clear_policy(&world.client).await;
    delete_namespaces(&world, std::slice::from_ref(&plugins_ns)).await;
    eventually(CONVERGE, "the plugin namespace gone", || async {
        get(&namespaces, &plugins_ns).await.is_none().then_some(())
    })
    .await;
    let earlier = format!("rh-{suffix}-a");
    install(&earlier).unwrap_or_else(|e| panic!("{e}"));
    uninstall(&earlier);
    let namespace = get(&namespaces, &plugins_ns)
        .await
        .expect("the plugin namespace is kept");
    assert_eq!(
        namespace["metadata"]["annotations"]["meta.helm.sh/release-name"],
        earlier.as_str()
    );
    let next = format!("rh-{suffix}-b");
    let installed = install(&next).unwrap_or_else(|e| panic!("{e}"));
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let upgraded = helm(
        &world,
        &[
            "upgrade",
            &next,
            &chart,
            "--namespace",
            &world.namespace,
            "--reuse-values",
            "--set",
            "replicaCount=1",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    uninstall(&next);
    assert!(
        get(&policies, POLICY).await.is_none(),
        "the policy this release made goes with it"
    );
    delete_namespaces(&world, &[plugins_ns]).await;
}

/// Creates the namespaces that do not exist; returns those it created.
async fn ensure_namespaces(world: &World, names: &[&str]) -> Vec<String> {
    let api = cluster_api(&world.client, "v1", "Namespace", "namespaces");
    let mut created = Vec::new();
    for name in names {
        if get(&api, name).await.is_none() {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            api.create(&Default::default(), &serde_json::from_value(body).unwrap())
                .await
                .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
            created.push((*name).to_owned());
        }
    }
    created
}

async fn delete_namespaces(world: &World, names: &[String]) {
    let api = cluster_api(&world.client, "v1", "Namespace", "namespaces");
    for name in names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}
