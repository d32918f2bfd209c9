//! `reconhost init`: writes a plugin project that builds, has a CRD, fixtures, a unit test and
//! a render test, in Rust, Python or TypeScript.
//!
//! The project vendors the SDK of its language and the WIT contract, copied from this binary,
//! so it builds wherever it is put, with nothing from reconhost but the `reconhost` binary for
//! its render test. Every file is a template with `{{name}}`-style placeholders.

use std::path::{Path, PathBuf};

use crate::cli::{InitArgs, Lang};

/// Why a project could not be written.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A flag's value is not usable.
    #[error("{flag} {value:?}: {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The directory exists and holds files.
    #[error("{0} exists and is not empty; reconhost init writes a new project")]
    NotEmpty(PathBuf),
    /// Writing failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The placeholders of one project.
struct Names {
    kind: String,
    group: String,
    version: String,
    /// The plugin's name: the kind in lower case (a DNS label).
    name: String,
    /// The name as a Rust crate identifier.
    krate: String,
    /// The resource name: the kind in lower case, plural.
    plural: String,
}

impl Names {
    fn new(args: &InitArgs) -> Result<Self, InitError> {
        let invalid = |flag, value: &str, reason| InitError::Invalid {
            flag,
            value: value.to_owned(),
            reason,
        };
        let kind = &args.kind;
        if !kind.starts_with(|c: char| c.is_ascii_uppercase())
            || !kind.chars().all(|c| c.is_ascii_alphanumeric())
            || kind.len() > 63
        {
            return Err(invalid(
                "--kind",
                kind,
                "a kind is CamelCase ASCII letters and digits, starting with a capital",
            ));
        }
        let group = &args.group;
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !group.contains('.') || group.len() > 253 || !group.split('.').all(label_ok) {
            return Err(invalid(
                "--group",
                group,
                "a group is a lower-case DNS subdomain with at least one dot, e.g. example.com",
            ));
        }
        let version = &args.version;
        if !version.starts_with('v') || !label_ok(version) {
            return Err(invalid(
                "--version",
                version,
                "a version looks like v1, v1alpha1 or v2beta3",
            ));
        }
        let name = kind.to_ascii_lowercase();
        let plural = if ["s", "x", "z", "ch", "sh"]
            .iter()
            .any(|end| name.ends_with(end))
        {
            format!("{name}es")
        } else if let Some(stem) = name
            .strip_suffix('y')
            .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
        {
            format!("{stem}ies")
        } else {
            format!("{name}s")
        };
        Ok(Self {
            kind: kind.clone(),
            group: group.clone(),
            version: version.clone(),
            krate: name.replace('-', "_"),
            name,
            plural,
        })
    }

    fn fill(&self, template: &str) -> String {
        template
            .replace("{{kind}}", &self.kind)
            .replace("{{group}}", &self.group)
            .replace("{{version}}", &self.version)
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{plural}}", &self.plural)
    }
}

/// The WIT contract new projects are written against (the newest the host loads), and where
/// a project keeps it.
const WIT: &str = include_str!("../../wit/reconhost-plugin@0.2.0/plugin.wit");
const WIT_PATH: &str = "wit/reconhost-plugin@0.2.0/plugin.wit";

/// Files every project has: the CRD and the fixtures.
const COMMON: &[(&str, &str)] = &[
    ("crd.yaml", include_str!("init/common/crd.yaml")),
    (
        "fixtures/parent.yaml",
        include_str!("init/common/parent.yaml"),
    ),
    (
        "fixtures/invalid.yaml",
        include_str!("init/common/invalid.yaml"),
    ),
];

const RUST: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("init/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("init/rust/lib.rs")),
    ("tests/render.rs", include_str!("init/rust/render.rs")),
    ("README.md", include_str!("init/rust/README.md")),
    (".gitignore", "/target\n"),
    // The versions reconhost's own plugins are built and tested with.
    ("Cargo.lock", include_str!("../../plugins/Cargo.lock")),
    ("sdk/Cargo.toml", include_str!("init/rust/sdk-Cargo.toml")),
    (
        "sdk/src/check.rs",
        include_str!("../../plugins/sdk/src/check.rs"),
    ),
    (
        "sdk/src/host.rs",
        include_str!("../../plugins/sdk/src/host.rs"),
    ),
    (
        "sdk/src/info.rs",
        include_str!("../../plugins/sdk/src/info.rs"),
    ),
    (
        "sdk/src/object.rs",
        include_str!("../../plugins/sdk/src/object.rs"),
    ),
    (
        "sdk/src/request.rs",
        include_str!("../../plugins/sdk/src/request.rs"),
    ),
    (
        "sdk/src/response.rs",
        include_str!("../../plugins/sdk/src/response.rs"),
    ),
];

/// The Rust SDK's root, with the WIT path it has in this repository changed to the project's.
fn rust_sdk_lib() -> String {
    include_str!("../../plugins/sdk/src/lib.rs").replace(
        "path: \"../../wit/reconhost-plugin@0.2.0\"",
        "path: \"../wit/reconhost-plugin@0.2.0\"",
    )
}

/// Writes the project and returns what to tell the user.
pub fn init(args: &InitArgs) -> Result<String, InitError> {
    let names = Names::new(args)?;
    let dir = &args.dir;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(InitError::NotEmpty(dir.clone()));
    }
    let mut files = fill(&names, COMMON);
    files.push((WIT_PATH.to_owned(), WIT.to_owned()));
    let next = match args.lang {
        Lang::Rust => {
            files.extend(fill(&names, RUST));
            files.push(("sdk/src/lib.rs".to_owned(), rust_sdk_lib()));
            [
                "cargo build --release --target wasm32-wasip2".to_owned(),
                "cargo test".to_owned(),
                format!(
                    "reconhost render --plugin target/wasm32-wasip2/release/{}.wasm --parent fixtures/parent.yaml",
                    names.krate
                ),
            ]
        }
        Lang::Python => languages::python(&names, &mut files),
        Lang::Ts => languages::typescript(&names, &mut files),
    };
    for (path, text) in &files {
        write(&dir.join(path), text)?;
    }
    Ok(format!(
        "wrote the {} plugin {} for {}/{} {} to {}\nnext:\n  cd {}\n  {}\n",
        match args.lang {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Ts => "TypeScript",
        },
        names.name,
        names.group,
        names.version,
        names.kind,
        dir.display(),
        dir.display(),
        next.join("\n  ")
    ))
}

/// Templates, with the project's names filled in.
fn fill(names: &Names, list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(path, text)| (path.to_string(), names.fill(text)))
        .collect()
}

/// Files copied as they are (the SDKs).
fn copy(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(path, text)| (path.to_string(), text.to_string()))
        .collect()
}

fn write(path: &Path, text: &str) -> Result<(), InitError> {
    let fail = |source| InitError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    std::fs::write(path, text).map_err(fail)?;
    if path.extension().is_some_and(|e| e == "sh") {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    }
    Ok(())
}

#[path = "init/languages.rs"]
mod languages;

#[cfg(test)]
mod tests {
    use super::*;

    fn args(kind: &str, group: &str) -> InitArgs {
        InitArgs {
            dir: PathBuf::from("/nonexistent"),
            lang: Lang::Rust,
            kind: kind.to_owned(),
            group: group.to_owned(),
            version: "v1alpha1".to_owned(),
        }
    }

    #[test]
    fn names_should_follow_kubernetes_conventions() {
        let n = Names::new(&args("Widget", "example.com")).unwrap();
        assert_eq!((n.name.as_str(), n.plural.as_str()), ("widget", "widgets"));
        let n = Names::new(&args("Policy", "example.com")).unwrap();
        assert_eq!(n.plural, "policies");
        let n = Names::new(&args("Gateway", "example.com")).unwrap();
        assert_eq!(n.plural, "gateways");
        let n = Names::new(&args("Ingress", "example.com")).unwrap();
        assert_eq!(n.plural, "ingresses");
        let n = Names::new(&args("Mesh", "example.com")).unwrap();
        assert_eq!(n.plural, "meshes");
    }

    #[test]
    fn the_crd_should_show_synced_ready_and_age_columns() {
        let n = Names::new(&args("Widget", "example.com")).unwrap();
        let crd: serde_json::Value = serde_saphyr::from_str(&n.fill(COMMON[0].1)).unwrap();
        let columns: Vec<(&str, &str)> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .expect("printer columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default(),
                    c["jsonPath"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                (
                    "Synced",
                    r#".status.conditions[?(@.type=="Synced")].status"#
                ),
                ("Ready", r#".status.conditions[?(@.type=="Ready")].status"#),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
    }

    #[test]
    fn bad_flags_should_be_refused_naming_the_flag() {
        for (kind, group, flag) in [
            ("widget", "example.com", "--kind"),
            ("Wid-get", "example.com", "--kind"),
            ("Widget", "example", "--group"),
            ("Widget", "Example.com", "--group"),
        ] {
            let err = Names::new(&args(kind, group)).err().expect("refused");
            assert!(err.to_string().starts_with(flag), "{err}");
        }
    }

    #[test]
    fn the_vendored_rust_sdk_should_be_whole_and_use_the_vendored_wit() {
        let lib = rust_sdk_lib();
        let wit_dir = WIT_PATH.strip_suffix("/plugin.wit").expect("a plugin.wit");
        assert!(
            lib.contains(&format!("path: \"../{wit_dir}\"")),
            "the SDK's bindings are generated from {wit_dir}"
        );
        assert!(WIT.contains(&format!(
            "package reconhost:plugin@{};",
            wit_dir.rsplit('@').next().expect("a version")
        )));
        let modules: Vec<&str> = lib
            .lines()
            .filter_map(|l| {
                l.strip_prefix("pub mod ")
                    .or_else(|| l.strip_prefix("mod "))
            })
            .filter_map(|m| m.strip_suffix(';'))
            .collect();
        assert!(modules.contains(&"response"), "{modules:?}");
        for module in modules {
            let file = format!("sdk/src/{module}.rs");
            assert!(
                RUST.iter().any(|(path, _)| *path == file),
                "{file} is vendored"
            );
        }
    }

    #[test]
    fn a_directory_with_files_should_be_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
        let mut a = args("Widget", "example.com");
        a.dir = dir.path().to_owned();
        assert!(matches!(init(&a), Err(InitError::NotEmpty(_))));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
            "mine"
        );
    }
}
