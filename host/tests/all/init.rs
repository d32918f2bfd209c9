//! `reconhost init` projects, built and tested the way their README says, in every language:
//! the generated unit tests pass, the component builds, and the generated render test (which
//! runs this `reconhost render` on the fixtures) passes.

use std::path::{Path, PathBuf};
use std::process::Command;

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
}
