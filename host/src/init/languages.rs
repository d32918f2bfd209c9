//! The Python and TypeScript projects of `reconhost init`: the plugin, its tests and build, and
//! the SDK vendored from plugins/python and plugins/js with its pinned toolchain.

use serde_json::Value;

use super::{Names, WIT_PATH, copy, fill};

/// The directory of the WIT contract `reconhost init` vendors, which the projects build against.
fn wit_dir() -> &'static str {
    WIT_PATH
        .strip_suffix("/plugin.wit")
        .expect("the vendored WIT is a plugin.wit")
}

/// The Python SDK, file by file (a test checks this is the whole package).
pub(super) const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "reconhost/__init__.py",
        include_str!("../../../plugins/python/reconhost/__init__.py"),
    ),
    (
        "reconhost/_export.py",
        include_str!("../../../plugins/python/reconhost/_export.py"),
    ),
    (
        "reconhost/_model.py",
        include_str!("../../../plugins/python/reconhost/_model.py"),
    ),
    (
        "reconhost/_wire.py",
        include_str!("../../../plugins/python/reconhost/_wire.py"),
    ),
    (
        "reconhost/host.py",
        include_str!("../../../plugins/python/reconhost/host.py"),
    ),
    (
        "reconhost/py.typed",
        include_str!("../../../plugins/python/reconhost/py.typed"),
    ),
];

const PYTHON: &[(&str, &str)] = &[
    ("app.py", include_str!("python/app.py")),
    ("test_app.py", include_str!("python/test_app.py")),
    ("test_render.py", include_str!("python/test_render.py")),
    ("build.sh", include_str!("python/build.sh")),
    ("README.md", include_str!("python/README.md")),
    (
        "requirements.txt",
        include_str!("../../../plugins/python/requirements.txt"),
    ),
    (".gitignore", "build/\n__pycache__/\n.pytest_cache/\n"),
];

/// The TypeScript SDK, file by file (a test checks this is the whole SDK).
pub(super) const TS_SDK: &[(&str, &str)] = &[
    (
        "sdk/host.ts",
        include_str!("../../../plugins/js/sdk/host.ts"),
    ),
    (
        "sdk/index.ts",
        include_str!("../../../plugins/js/sdk/index.ts"),
    ),
    (
        "sdk/wire.ts",
        include_str!("../../../plugins/js/sdk/wire.ts"),
    ),
    ("sdk/wit.ts", include_str!("../../../plugins/js/sdk/wit.ts")),
];

const TS: &[(&str, &str)] = &[
    ("src/plugin.ts", include_str!("ts/plugin.ts")),
    ("src/plugin.test.ts", include_str!("ts/plugin.test.ts")),
    ("src/render.test.ts", include_str!("ts/render.test.ts")),
    ("tsconfig.json", include_str!("ts/tsconfig.json")),
    ("README.md", include_str!("ts/README.md")),
    ("build.mjs", include_str!("../../../plugins/js/build.mjs")),
    (".gitignore", "node_modules/\ndist/\nbuild/\n"),
];

const JS_PACKAGE: &str = include_str!("../../../plugins/js/package.json");
const JS_LOCK: &str = include_str!("../../../plugins/js/package-lock.json");
/// The name plugins/js/package.json and its lockfile give the package.
const JS_PACKAGE_NAME: &str = "reconhost-plugins-js";

/// Adds the files of a Python project; returns the next three commands.
pub(super) fn python(names: &Names, files: &mut Vec<(String, String)>) -> [String; 3] {
    files.extend(fill(names, PYTHON));
    files.extend(copy(PYTHON_SDK));
    [
        "./build.sh".to_owned(),
        "python3 -m pytest".to_owned(),
        format!(
            "reconhost render --plugin build/{}.wasm --parent fixtures/parent.yaml",
            names.name
        ),
    ]
}

/// Adds the files of a TypeScript project; returns the next three commands.
pub(super) fn typescript(names: &Names, files: &mut Vec<(String, String)>) -> [String; 3] {
    files.extend(fill(names, TS));
    files.extend(copy(TS_SDK));
    files.push(("package.json".to_owned(), package_json(names)));
    // The same versions as reconhost's own plugins, so `npm ci` installs what was tested.
    files.push((
        "package-lock.json".to_owned(),
        JS_LOCK.replace(
            &format!("\"name\": \"{JS_PACKAGE_NAME}\""),
            &format!("\"name\": \"{}\"", names.name),
        ),
    ));
    [
        "npm ci".to_owned(),
        "npm run build".to_owned(),
        "npm test".to_owned(),
    ]
}

/// plugins/js/package.json with the project's name and its build and test scripts.
fn package_json(names: &Names) -> String {
    let mut package: Value =
        serde_json::from_str(JS_PACKAGE).expect("plugins/js/package.json is JSON");
    package["name"] = names.name.clone().into();
    package["description"] = format!(
        "reconhost plugin for {} ({}/{})",
        names.kind, names.group, names.version
    )
    .into();
    package["scripts"] = serde_json::json!({
        "build": format!("node build.mjs src/plugin.ts {} build/{}.wasm", wit_dir(), names.name),
        "test": "rm -rf dist && tsc -p . && node --test dist/src/",
    });
    serde_json::to_string_pretty(&package).expect("JSON") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of an SDK directory is vendored: a file added to the SDK and not here fails.
    fn whole(dir: &str, vendored: &[(&str, &str)], prefix: &str) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut on_disk: Vec<String> = std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .map(|e| format!("{prefix}/{}", e.file_name().to_string_lossy()))
            .filter(|p| !p.ends_with(".pyc"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = vendored.iter().map(|(p, _)| p.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk, "{dir} and what reconhost init vendors");
    }

    #[test]
    fn the_whole_sdk_of_each_language_should_be_vendored() {
        whole("../plugins/python/reconhost", PYTHON_SDK, "reconhost");
        whole("../plugins/js/sdk", TS_SDK, "sdk");
    }

    #[test]
    fn every_build_should_use_the_vendored_wit() {
        let names = Names::new(&crate::cli::InitArgs {
            dir: "widget".into(),
            lang: crate::cli::Lang::Ts,
            kind: "Widget".into(),
            group: "example.com".into(),
            version: "v1alpha1".into(),
        })
        .expect("valid names");
        let package: Value = serde_json::from_str(&package_json(&names)).expect("JSON");
        assert_eq!(
            package["scripts"]["build"],
            format!(
                "node build.mjs src/plugin.ts {} build/widget.wasm",
                wit_dir()
            )
        );
        let (_, build) = PYTHON
            .iter()
            .find(|(path, _)| *path == "build.sh")
            .expect("a build.sh");
        assert!(
            build.contains(&format!(" -d {} ", wit_dir())),
            "build.sh builds against {}",
            wit_dir()
        );
        let version = wit_dir().rsplit('@').next().expect("a version");
        for files in [PYTHON, TS] {
            let (_, readme) = files
                .iter()
                .find(|(path, _)| *path == "README.md")
                .expect("a README");
            assert!(
                readme.contains(&format!("(`reconhost:plugin@{version}`)")),
                "the README names the contract: {readme}"
            );
        }
    }

    #[test]
    fn the_lockfile_should_name_the_project_where_the_package_does() {
        assert_eq!(
            JS_LOCK
                .matches(&format!("\"name\": \"{JS_PACKAGE_NAME}\""))
                .count(),
            2,
            "the lockfile's root and its packages[\"\"] entry"
        );
        let package: Value = serde_json::from_str(JS_PACKAGE).unwrap();
        assert_eq!(package["name"], JS_PACKAGE_NAME);
    }
}
