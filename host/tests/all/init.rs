//! `reconhost init` projects, built and tested the way their README says, in every language:
//! the generated unit tests pass, the component builds, and the generated render test (which
//! runs this `reconhost render` on the fixtures) passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use reconhost_tests::binaries::Binaries;

fn reconhost() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_reconhost"))
}

/// Where generated projects' builds go: beside the workspace's, kept between runs (so a second
/// run does not compile their dependencies again), apart from it (so no build waits on the
/// workspace's lock).
fn build_cache(lang: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")));
    target.join("init").join(lang)
}

/// Runs a command in `dir`; fails the test with everything it printed.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        // As a user runs it: `make test` builds with the image's static flags, which would break
        // a native build of the project's proc-macros.
        .env_remove("RUSTFLAGS")
        .env("RECONHOST", reconhost());
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "{program} {args:?} in {} failed:\n{}\n{}",
        dir.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout) + &text(&out.stderr)
}

/// `reconhost init <dir> --lang <lang> --kind Widget --group example.com`; returns the project
/// directory and the three commands the output says to run next.
fn init(root: &Path, lang: &str) -> (PathBuf, Vec<String>) {
    let dir = root.join(format!("widget-{lang}"));
    let out = run(
        root,
        reconhost().to_str().expect("a UTF-8 path"),
        &[
            "init",
            dir.to_str().expect("a UTF-8 path"),
            "--lang",
            lang,
            "--kind",
            "Widget",
            "--group",
            "example.com",
        ],
        &[],
    );
    let next: Vec<String> = out
        .lines()
        .skip_while(|l| *l != "next:")
        .skip(2)
        .map(|l| l.trim().to_owned())
        .collect();
    assert_eq!(next.len(), 3, "three next commands: {out}");
    for file in ["crd.yaml", "fixtures/parent.yaml", "README.md"] {
        assert!(dir.join(file).is_file(), "{file} is written");
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README");
    for command in &next {
        assert!(
            readme.contains(command.as_str()),
            "the README shows `{command}`"
        );
    }
    (dir, next)
}

#[test]
fn a_rust_project_should_build_and_pass_its_tests() {
    let root = tempfile::tempdir().expect("a scratch directory");
    let (dir, next) = init(root.path(), "rust");
    assert_eq!(next[0], "cargo build --release --target wasm32-wasip2");
    let target = build_cache("rust");
    let env = [("CARGO_TARGET_DIR", target.as_path())];
    run(
        &dir,
        "cargo",
        &["build", "--release", "--target", "wasm32-wasip2"],
        &env,
    );
    let tested = run(&dir, "cargo", &["test"], &env);
    assert!(
        tested.contains("the_component_should_render_a_config_map_for_the_fixture ... ok"),
        "{tested}"
    );
    assert!(
        tested.contains("a_message_should_become_a_config_map ... ok"),
        "{tested}"
    );
    // The build went to the shared cache; the README's path is where a user's build puts it.
    let built = target.join("wasm32-wasip2/release/widget.wasm");
    let printed = dir.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&printed).expect("the project's target directory");
    std::fs::copy(&built, printed.join("widget.wasm")).expect("the component");
    install_as_the_readme_says(&dir);
}

#[test]
fn a_python_project_should_build_and_pass_its_tests() {
    let root = tempfile::tempdir().expect("a scratch directory");
    let (dir, next) = init(root.path(), "python");
    assert_eq!(next[..2], ["./build.sh", "python3 -m pytest"]);
    run(&dir, "./build.sh", &[], &[]);
    assert!(
        dir.join("build/widget.wasm").is_file(),
        "the component is built"
    );
    // The README's render, first with nothing compiled: it says it is compiling rather than
    // sitting silent; the second run loads the compiled code and says nothing of the kind.
    let cache = root.path().join("compiled");
    let render: Vec<&str> = next[2].split_whitespace().collect();
    assert_eq!(render[..2], ["reconhost", "render"], "{next:?}");
    let reconhost = reconhost();
    let reconhost = reconhost.to_str().expect("a UTF-8 path");
    let first = run(
        &dir,
        reconhost,
        &render[1..],
        &[("RECONHOST_CACHE", &cache)],
    );
    assert!(
        first.contains("compiling build/widget.wasm (") && first.contains("compiled-code cache"),
        "{first}"
    );
    let again = run(
        &dir,
        reconhost,
        &render[1..],
        &[("RECONHOST_CACHE", &cache)],
    );
    assert!(!again.contains("compiling"), "{again}");
    let tested = run(
        &dir,
        "python3",
        &["-m", "pytest", "-v", "-p", "no:cacheprovider"],
        &[],
    );
    assert!(
        tested.contains("test_the_component_should_render_a_config_map_for_the_fixture PASSED"),
        "{tested}"
    );
    assert!(
        tested.contains("test_a_message_should_become_a_config_map PASSED"),
        "{tested}"
    );
    install_as_the_readme_says(&dir);
}

#[test]
fn a_typescript_project_should_build_and_pass_its_tests() {
    let root = tempfile::tempdir().expect("a scratch directory");
    let (dir, next) = init(root.path(), "ts");
    assert_eq!(next, ["npm ci", "npm run build", "npm test"]);
    run(
        &dir,
        "npm",
        &["ci", "--no-audit", "--no-fund", "--loglevel=error"],
        &[],
    );
    run(&dir, "npm", &["run", "build"], &[]);
    assert!(
        dir.join("build/widget.wasm").is_file(),
        "the component is built"
    );
    let tested = run(&dir, "npm", &["test"], &[]);
    let passed = |name: &str| {
        tested
            .lines()
            .any(|l| l.starts_with("ok ") && l.ends_with(name))
    };
    assert!(
        passed("the component renders a ConfigMap for the fixture"),
        "{tested}"
    );
    assert!(passed("a message becomes a ConfigMap"), "{tested}");
    assert!(tested.contains("# fail 0"), "{tested}");
    assert!(tested.contains("# pass 4"), "{tested}");
    install_as_the_readme_says(&dir);
}

/// Runs the generated README's install commands as printed, against the test control plane
/// (and its plain-HTTP registry as `$REGISTRY`), then the uninstall command it names, and
/// checks that what `--rbac` made is gone again.
fn install_as_the_readme_says(dir: &Path) {
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README");
    let section = readme
        .split_once("## Install in a cluster")
        .expect("an install section")
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("the install commands")
        .0;
    let uninstall = section
        .split('`')
        .find(|s| s.starts_with("reconhost plugin uninstall "))
        .expect("the uninstall command");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let world = runtime.block_on(common::World::new("init-install"));
    // The ReconcilePlugin, its ClusterRoles and the plugin namespace are cluster-wide.
    let _suite = runtime.block_on(common::plugins::exclusive(&world.client));
    let kubeconfig = world.cluster.kubeconfig().to_owned();
    let registry = world
        .cluster
        .registry()
        .expect("the test registry")
        .trim()
        .to_owned();
    let kubectl = Binaries::locate().unwrap_or_else(|e| panic!("{e}")).kubectl;
    let path = std::env::join_paths(
        [reconhost(), kubectl.clone()]
            .iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .expect("a PATH");
    // What the chart makes before anyone installs a plugin.
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: reconhost-plugins\n";
    let applied = Command::new(&kubectl)
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "apply",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(namespace.as_bytes())?;
            c.wait()
        })
        .expect("kubectl apply");
    assert!(applied.success(), "creating namespace reconhost-plugins");

    let shell = |script: &str| {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(dir)
            .env_remove("RUSTFLAGS")
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .env("REGISTRY", &registry)
            .output()
            .expect("running bash");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "as printed in the README:\n{script}\nfailed:\n{text}"
        );
        text
    };
    if block.contains(" --insecure-registry $REGISTRY") {
        // As someone who forgot the flag the README names runs it: the test registry speaks
        // plain HTTP, and the error says so, and what to pass.
        let forgot = block.replace(" --insecure-registry $REGISTRY", "");
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &forgot])
            .current_dir(dir)
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .env("REGISTRY", &registry)
            .output()
            .expect("running bash");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && text.contains(&format!("registry {registry} speaks plain HTTP"))
                && text.contains(&format!("--insecure-registry {registry}"))
                && !text.contains("InvalidContentType"),
            "{text}"
        );
    }
    let installed = shell(block);
    let listed = installed
        .lines()
        .find(|l| l.starts_with("widget.example.com "))
        .unwrap_or_else(|| panic!("plugin list shows the plugin: {installed}"));
    assert!(
        listed.contains("example.com/v1alpha1/Widget")
            && listed.contains("reconhost-plugins/widget")
            && listed.contains("object(s) made by install"),
        "{listed}"
    );
    let removed = shell(uninstall);
    assert!(
        removed.contains("ReconcilePlugin widget.example.com deleted"),
        "{removed}"
    );
    let account = Command::new(&kubectl)
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["get", "serviceaccount", "-n", "reconhost-plugins", "widget"])
        .output()
        .expect("kubectl get");
    assert!(
        !account.status.success(),
        "the ServiceAccount --rbac made is gone: {removed}"
    );
}
