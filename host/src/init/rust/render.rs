//! The built component, run by `reconhost render` on the fixtures: what the host itself would
//! do with it. Build it first: `cargo build --release --target wasm32-wasip2`. The `reconhost`
//! binary is taken from $RECONHOST, or from PATH.

use std::path::PathBuf;
use std::process::Command;

fn render(parent: &str) -> (bool, String, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let component = target.join("wasm32-wasip2/release/{{crate}}.wasm");
    assert!(
        component.is_file(),
        "{} is missing: run `cargo build --release --target wasm32-wasip2` first",
        component.display()
    );
    let reconhost = std::env::var_os("RECONHOST").unwrap_or_else(|| "reconhost".into());
    let out = Command::new(&reconhost)
        .arg("render")
        .arg("--plugin")
        .arg(&component)
        .arg("--parent")
        .arg(root.join("fixtures").join(parent))
        .args(["-o", "json"])
        .output()
        .unwrap_or_else(|e| panic!("running {reconhost:?} (set RECONHOST to its path): {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_component_should_render_a_config_map_for_the_fixture() {
    let (ok, out, err) = render("parent.yaml");
    assert!(ok, "render failed: {err}");
    let rendered: serde_json::Value = serde_json::from_str(&out).expect("render prints JSON");
    let children = rendered["children"].as_array().expect("children");
    assert_eq!(children.len(), 1, "{rendered}");
    assert_eq!(children[0]["action"], "create", "{rendered}");
    assert_eq!(children[0]["object"]["data"]["message"], "hello", "{rendered}");
    assert_eq!(rendered["conditions"][0]["status"], "True", "{rendered}");
}

#[test]
fn the_component_should_refuse_the_invalid_fixture() {
    let (ok, _, err) = render("invalid.yaml");
    assert!(!ok, "an empty message must fail");
    assert!(err.contains("spec.message must not be empty"), "{err}");
}
