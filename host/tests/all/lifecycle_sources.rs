//! Where plugins come from: the `reconhost plugin` CLI, a real OCI registry on loopback (with
//! oras as the independent client, both ways), the compiled-code cache across a host restart,
//! and the `--watch` dev loop.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::plugins::{digest_of, exclusive, has, oci_tool, run};
use common::{CONVERGE, World, get, plugin};
use kube::api::{Patch, PatchParams};
use reconhost_tests::support::eventually;
use serde_json::{Value, json};

const GENERATOR_RP: &str = "configmapgenerator.examples.reconhost.dev";

fn reconhost() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_reconhost"))
}

/// Runs `reconhost <args>` against the test control plane; returns (success, stdout, stderr).
fn cli(world: &World, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(reconhost())
        .args(args)
        .env("KUBECONFIG", world.cluster.kubeconfig())
        .output()
        .expect("running reconhost");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn scratch(world: &World) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reconhost-sources-{}", world.namespace));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The sources suite's steps: ConfigMapGenerator parents and the ConfigMaps they generate.
trait SourcesWorld {
    fn generators(&self) -> kube::Api<kube::api::DynamicObject>;

    async fn create_generator(&self, name: &str, content: Value);

    async fn generated(&self, name: &str, content: Value);
}

impl SourcesWorld for World {
    fn generators(&self) -> kube::Api<kube::api::DynamicObject> {
        self.api(
            "examples.reconhost.dev",
            "v1alpha1",
            "ConfigMapGenerator",
            "configmapgenerators",
        )
    }

    async fn create_generator(&self, name: &str, content: Value) {
        self.create(
            &self.generators(),
            json!({"apiVersion": "examples.reconhost.dev/v1alpha1", "kind": "ConfigMapGenerator",
                   "metadata": {"name": name}, "spec": {"content": content}}),
        )
        .await;
    }

    async fn generated(&self, name: &str, content: Value) {
        eventually(
            CONVERGE,
            &format!("ConfigMap {name} with {content}"),
            || async {
                let cm = get(&self.config_maps(), name).await?;
                (cm["data"] == content).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test]
async fn cli_install_through_oci_should_reconcile_and_oras_should_read_what_was_pushed() {
    let world = World::new("rp-oci").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let registry = world.registry();
    let reference = format!("{registry}/{}/configmap-generator:0.1.0", world.namespace);
    let component = plugin("configmap-generator");
    let component_arg = component.display().to_string();
    let account = format!("{}/plugin", world.namespace);
    let (ok, out, err) = cli(
        &world,
        &[
            "plugin",
            "install",
            &component_arg,
            "--oci",
            &reference,
            "--insecure-registry",
            &registry,
            "--service-account",
            &account,
        ],
    );
    assert!(ok, "reconhost plugin install failed: {err}");
    assert!(out.contains(GENERATOR_RP), "{out}");

    let _host = world
        .host_with(&[], &[], &[&format!("--insecure-registry={registry}")])
        .await;
    let rp = world.plugin_ready(GENERATOR_RP).await;
    assert_eq!(rp["spec"]["source"]["oci"]["reference"], reference.as_str());
    assert!(
        has(&rp, "Fetched", "True", "Fetched"),
        "pulled from the registry: {rp}"
    );
    world.create_generator("gen", json!({"a": "1"})).await;
    world.generated("gen", json!({"a": "1"})).await;

    // An independent client reads the artifact as the CNCF wasm layout describes it.
    let oras = oci_tool("oras");
    let dir = scratch(&world);
    let manifest: Value = serde_json::from_str(&run(
        &oras,
        &["manifest", "fetch", "--plain-http", &reference],
        &dir,
    ))
    .expect("the manifest is JSON");
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], digest_of(&component).as_str());
    let pulled = dir.join("pulled.wasm");
    run(
        &oras,
        &[
            "blob",
            "fetch",
            "--plain-http",
            "--output",
            &pulled.display().to_string(),
            &format!(
                "{reference_repo}@{digest}",
                reference_repo = reference.rsplit_once(':').unwrap().0,
                digest = digest_of(&component)
            ),
        ],
        &dir,
    );
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(&component).unwrap(),
        "oras pulls the bytes reconhost pushed"
    );
    world.uninstall(GENERATOR_RP).await;
}

#[tokio::test]
async fn artifacts_pushed_by_oras_in_either_dialect_should_install() {
    let world = World::new("rp-oras").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let registry = world.registry();
    let oras = oci_tool("oras");
    let dir = scratch(&world);
    let component = plugin("configmap-generator");
    std::fs::copy(&component, dir.join("plugin.wasm")).expect("copying the component");
    std::fs::write(dir.join("config.json"), "{}").expect("a config");
    let _host = world
        .host_with(&[], &[], &[&format!("--insecure-registry={registry}")])
        .await;
    let dialects = [
        ("application/vnd.wasm.config.v0+json", "application/wasm"),
        (
            "application/vnd.wasm.config.v1+json",
            "application/vnd.wasm.content.layer.v1+wasm",
        ),
    ];
    for (i, (config_type, layer_type)) in dialects.into_iter().enumerate() {
        let reference = format!("{registry}/{}/oras:{i}", world.namespace);
        run(
            &oras,
            &[
                "push",
                "--plain-http",
                &reference,
                "--config",
                &format!("config.json:{config_type}"),
                &format!("plugin.wasm:{layer_type}"),
            ],
            &dir,
        );
        let rp = world.reconcile_plugin(
            GENERATOR_RP,
            ["examples.reconhost.dev/v1alpha1", "ConfigMapGenerator"],
            &digest_of(&component),
            json!({"oci": {"reference": reference}}),
        );
        world.apply_plugin(&rp).await;
        let rp = world.plugin_ready(GENERATOR_RP).await;
        assert_eq!(
            rp["status"]["activeDigest"],
            digest_of(&component).as_str(),
            "{layer_type}"
        );
        let name = format!("gen{i}");
        world
            .create_generator(&name, json!({"dialect": layer_type}))
            .await;
        world.generated(&name, json!({"dialect": layer_type})).await;
        world.uninstall(GENERATOR_RP).await;
    }
}

#[tokio::test]
async fn a_restarted_host_should_resume_its_plugins_from_the_compiled_code_cache() {
    let world = World::new("rp-restart").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let registry = world.registry();
    let cache = scratch(&world).join("cache");
    let cache_env = cache.display().to_string();
    let env = [("RECONHOST_CACHE", cache_env.as_str())];
    let insecure = format!("--insecure-registry={registry}");
    let component = plugin("configmap-generator");
    let reference = format!("{registry}/{}/gen:1", world.namespace);
    let account = format!("{}/plugin", world.namespace);
    let (ok, _, err) = cli(
        &world,
        &[
            "plugin",
            "install",
            &component.display().to_string(),
            "--oci",
            &reference,
            "--insecure-registry",
            &registry,
            "--service-account",
            &account,
        ],
    );
    assert!(ok, "{err}");
    let host = world.host_with(&[], &env, &[&insecure]).await;
    world.plugin_ready(GENERATOR_RP).await;
    world.create_generator("gen", json!({"a": "1"})).await;
    world.generated("gen", json!({"a": "1"})).await;
    host.stop(std::time::Duration::from_secs(10));

    // The registry no longer has the artifact: a restarted host must not need it.
    let rp = common::plugins::reconcile_plugins(&world.client);
    let gone = json!({"spec": {"source": {"oci": {"reference": format!("127.0.0.1:9/{}/gen:1", world.namespace)}}}});
    rp.patch(GENERATOR_RP, &PatchParams::default(), &Patch::Merge(&gone))
        .await
        .expect("pointing the source at nothing");
    let host = world.host_with(&[], &env, &[&insecure]).await;
    let rp = world
        .plugin_status(GENERATOR_RP, "Ready from the cache", |rp| {
            has(rp, "Ready", "True", "Running") && has(rp, "Fetched", "True", "Cached")
        })
        .await;
    assert!(has(&rp, "Compiled", "True", "Cached"), "{rp}");
    world
        .generators()
        .patch(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"content": {"a": "2"}}})),
        )
        .await
        .expect("changing the generator");
    world.generated("gen", json!({"a": "2"})).await;
    world.uninstall(GENERATOR_RP).await;
    drop(host);
}

#[tokio::test]
async fn cli_should_print_manifests_and_refuse_a_configmap_too_large_with_a_way_out() {
    let world = World::new("rp-cli").await;
    let component = plugin("webapp");
    let account = format!("{}/plugin", world.namespace);
    let target = format!("{}/webapp", world.namespace);
    let (ok, out, err) = cli(
        &world,
        &[
            "plugin",
            "manifest",
            &component.display().to_string(),
            "--configmap",
            &target,
            "--service-account",
            &account,
            "--config",
            r#"{"tier":"gold"}"#,
            "--parent-selector",
            "team=a,env in (prod,staging)",
        ],
    );
    assert!(ok, "{err}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&out).expect("YAML");
    let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
    assert_eq!(docs.len(), 2, "{out}");
    assert_eq!(docs[0]["kind"], "ConfigMap");
    assert!(docs[0]["binaryData"]["plugin.wasm"].is_string(), "{out}");
    let rp = docs[1];
    assert_eq!(rp["kind"], "ReconcilePlugin");
    assert_eq!(rp["metadata"]["name"], "webapp.examples.reconhost.dev");
    assert_eq!(
        rp["spec"]["source"]["digest"],
        digest_of(&component).as_str()
    );
    assert_eq!(rp["spec"]["config"], json!({"tier": "gold"}));
    assert_eq!(
        rp["spec"]["parentSelector"],
        json!({"matchLabels": {"team": "a"},
               "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]})
    );
    assert_eq!(
        rp["spec"]["source"]["configMap"]["namespace"],
        world.namespace.as_str()
    );

    // Not compressible and over 1 MiB: the error says to use a registry.
    let big = scratch(&world).join("big.wasm");
    let mut bytes = std::fs::read(&component).unwrap();
    let mut x: u32 = 1;
    while bytes.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&big, &bytes).unwrap();
    let (ok, _, err) = cli(
        &world,
        &[
            "plugin",
            "install",
            &big.display().to_string(),
            "--configmap",
            &target,
            "--service-account",
            &account,
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("at most 1 MiB") && err.contains("--oci"),
        "{err}"
    );
    // A ConfigMap outside the ServiceAccount's namespace is refused before anything is written.
    let (ok, _, err) = cli(
        &world,
        &[
            "plugin",
            "install",
            &component.display().to_string(),
            "--configmap",
            "default/webapp",
            "--service-account",
            &account,
        ],
    );
    assert!(!ok);
    assert!(err.contains("ServiceAccount's namespace"), "{err}");
}

#[tokio::test]
async fn watch_should_swap_in_a_rebuilt_plugin_and_keep_serving_through_a_broken_one() {
    let world = World::new("watch").await;
    let dir = scratch(&world);
    let file = dir.join("stamp.wasm");
    std::fs::copy(plugin("lifecycle-v1"), &file).unwrap();
    let file_arg = format!("--plugin={}", file.display());
    // The static mode: no ReconcilePlugin is involved, so this test needs no exclusive lock.
    let host = world.host_with(&[], &[], &[&file_arg, "--watch"]).await;
    let stamps = world.api("test.reconhost.dev", "v1", "Stamp", "stamps");
    world
        .create(
            &stamps,
            json!({"apiVersion": "test.reconhost.dev/v1", "kind": "Stamp",
                   "metadata": {"name": "w"}, "spec": {"value": 1}}),
        )
        .await;
    let served = |version: &'static str| {
        let stamps = stamps.clone();
        async move {
            eventually(
                CONVERGE,
                &format!("served by version {version}"),
                || async {
                    let s = get(&stamps, "w").await?;
                    (s["status"]["servedBy"] == version).then_some(())
                },
            )
            .await
        }
    };
    served("1").await;
    replace(&file, b"not a component");
    eventually(CONVERGE, "the broken file reported", || async {
        host.logs()
            .iter()
            .any(|l| {
                l["message"] == "the new plugin does not load; the running version keeps serving"
            })
            .then_some(())
    })
    .await;
    replace(&file, &std::fs::read(plugin("lifecycle-v2")).unwrap());
    served("2").await;
}

/// Replaces a file the way a build does: write beside it, rename over it.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A registry that takes pushes and pulls only with a password (htpasswd, bcrypt): user
/// `reconhost`, password `plugin-pull-secret`.
struct PrivateRegistry {
    address: String,
    _process: reconhost_tests::process::Component,
}

const REGISTRY_USER: &str = "reconhost";
const REGISTRY_PASSWORD: &str = "plugin-pull-secret";

impl PrivateRegistry {
    async fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let address = format!("127.0.0.1:{port}");
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("htpasswd"),
            format!(
                "{REGISTRY_USER}:$2b$10$uvF542fyLxxY9ouG2T4aEOxGHremSSeGXQORzJZligIYOOmi8NQlq\n"
            ),
        )
        .unwrap();
        let config = format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {data}}}\nhttp: {{addr: {address}}}\nauth:\n  htpasswd: {{realm: reconhost-test, path: {htpasswd}}}\n",
            data = dir.join("data").display(),
            htpasswd = dir.join("htpasswd").display(),
        );
        std::fs::write(dir.join("config.yaml"), config).unwrap();
        let program = oci_tool("registry");
        let env = [("OTEL_TRACES_EXPORTER".to_owned(), "none".to_owned())];
        let process = reconhost_tests::process::Component::spawn_with_env(
            "private-registry",
            &program,
            &[
                "serve".to_owned(),
                dir.join("config.yaml").display().to_string(),
            ],
            &env,
            dir,
        )
        .expect("starting the private registry");
        eventually(CONVERGE, "the private registry to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Self {
            address,
            _process: process,
        }
    }
}

#[tokio::test]
async fn a_private_registry_should_need_the_pull_secret_of_the_plugins_namespace() {
    let world = World::new("rp-private").await;
    let _suite = exclusive(&world.client).await;
    world.service_account("plugin").await;
    let registry = PrivateRegistry::start(&scratch(&world).join("registry")).await;
    let reference = format!("{}/plugins/configmap-generator:1", registry.address);
    let component = plugin("configmap-generator");

    // Without credentials the push is refused; with them (the CLI takes them from the
    // environment) it goes through.
    let push = |with_password: bool| {
        let mut command = Command::new(reconhost());
        command.args([
            "plugin",
            "push",
            &component.display().to_string(),
            "--oci",
            &reference,
            "--insecure-registry",
            &registry.address,
        ]);
        if with_password {
            command
                .env("RECONHOST_REGISTRY_USERNAME", REGISTRY_USER)
                .env("RECONHOST_REGISTRY_PASSWORD", REGISTRY_PASSWORD);
        }
        command.output().expect("running reconhost plugin push")
    };
    assert!(
        !push(false).status.success(),
        "an anonymous push is refused"
    );
    let pushed = push(true);
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&pushed.stdout).trim(),
        digest_of(&component),
        "push prints the digest a ReconcilePlugin pins"
    );

    let _host = world
        .host_with(
            &[],
            &[],
            &[&format!("--insecure-registry={}", registry.address)],
        )
        .await;
    let mut rp = world.reconcile_plugin(
        GENERATOR_RP,
        ["examples.reconhost.dev/v1alpha1", "ConfigMapGenerator"],
        &digest_of(&component),
        json!({"oci": {"reference": reference}}),
    );
    world.apply_plugin(&rp).await;
    let refused = world
        .plugin_status(GENERATOR_RP, "an anonymous pull refused", |rp| {
            has(rp, "Fetched", "False", "FetchFailed")
        })
        .await;
    assert!(
        common::plugins::cond(&refused, "Fetched")
            .2
            .contains("authoriz"),
        "the registry's refusal is named: {refused}"
    );

    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD
        .encode(format!("{REGISTRY_USER}:{REGISTRY_PASSWORD}"));
    let docker = json!({"auths": {registry.address.clone(): {"auth": auth}}}).to_string();
    world
        .create(
            &world.api("", "v1", "Secret", "secrets"),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": "pull"},
                   "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(docker)}}),
        )
        .await;
    rp["spec"]["source"]["oci"]["pullSecretRef"] = json!({"name": "pull"});
    world.apply_plugin(&rp).await;
    world.plugin_ready(GENERATOR_RP).await;
    world
        .create_generator("private", json!({"from": "a private registry"}))
        .await;
    world
        .generated("private", json!({"from": "a private registry"}))
        .await;

    // The credentials served that ReconcilePlugin only: the same artifact without the secret
    // is refused again, though the host pulled it a moment ago.
    world.uninstall(GENERATOR_RP).await;
    rp["spec"]["source"]["oci"]
        .as_object_mut()
        .unwrap()
        .remove("pullSecretRef");
    world.apply_plugin(&rp).await;
    world
        .plugin_status(GENERATOR_RP, "refused again without the secret", |rp| {
            has(rp, "Fetched", "False", "FetchFailed")
        })
        .await;
    world.uninstall(GENERATOR_RP).await;
}
