//! The image suite's tools: where `make image` left the image, what the Debian image tools
//! (skopeo, umoci, buildah, podman) say about it, and a container that is removed on drop.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::Digest as _;

use super::chart::{must, on_path, output};

/// The image's tag: the host's version, as `make image` writes it (this crate's version is the
/// workspace's, which the host shares).
pub const TAG: &str = concat!("reconhost:", env!("CARGO_PKG_VERSION"));

/// The directory `make image` writes (`oci/`, the layout; `context/`, the Containerfile's).
pub fn image_dir() -> PathBuf {
    let dir = std::env::var_os("RECONHOST_IMAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| super::chart::root().join("target"))
                .join("image")
        });
    assert!(
        dir.join("oci/index.json").is_file(),
        "no image in {}: run `make image`",
        dir.display()
    );
    dir
}

/// The `oci:` transport reference of an image layout and tag, as skopeo and podman take it.
pub fn reference(layout: &Path, tag: &str) -> String {
    format!("oci:{}:{tag}", layout.display())
}

/// A Debian tool, installed by `.ci/run`.
pub fn tool(name: &str) -> PathBuf {
    on_path(name, name)
}

/// The image's config (`skopeo inspect --config`).
pub fn config(reference: &str) -> Value {
    let text = must(&tool("skopeo"), &["inspect", "--config", reference], None);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("skopeo's config: {e}\n{text}"))
}

/// Unpacks the image at `reference` into `into`/rootfs with umoci; returns the rootfs.
///
/// umoci names an image `DIR:TAG` and splits at the last colon, so the image is first copied
/// into a layout of its own under a tag without one.
pub fn unpack(reference: &str, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).unwrap();
    let layout = into.join("layout");
    let copy = format!("oci:{}:image", layout.display());
    must(
        &tool("skopeo"),
        &["copy", "--quiet", reference, &copy],
        None,
    );
    let bundle = into.join("bundle");
    let image = format!("{}:image", layout.display());
    must(
        &tool("umoci"),
        &["unpack", "--image", &image, &bundle.display().to_string()],
        None,
    );
    bundle.join("rootfs")
}

/// One entry of a file tree: kind, mode bits, owner, and a digest of a file's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `dir`, `symlink` or `file`.
    pub kind: &'static str,
    /// The permission bits (with setuid, setgid and sticky).
    pub mode: u32,
    /// (uid, gid).
    pub owner: (u32, u32),
    /// A file's SHA-256, in hex; `None` for the other kinds.
    pub digest: Option<String>,
}

/// Every path under `root` (relative, without the root itself).
pub fn tree(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) {
    for item in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = item.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let relative = path.strip_prefix(root).unwrap().display().to_string();
        let kind = if meta.is_dir() {
            "dir"
        } else if meta.file_type().is_symlink() {
            "symlink"
        } else {
            "file"
        };
        let digest = meta.is_file().then(|| {
            let bytes = std::fs::read(&path).unwrap();
            format!("{:x}", sha2::Sha256::digest(&bytes))
        });
        out.insert(
            relative,
            Entry {
                kind,
                mode: meta.permissions().mode() & 0o7777,
                owner: (meta.uid(), meta.gid()),
                digest,
            },
        );
        if meta.is_dir() {
            walk(root, &path, out);
        }
    }
}

/// Whether an ELF executable asks for a dynamic loader (has a `PT_INTERP` program header).
pub fn needs_loader(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    (0..count).any(|i| u32_at(phoff + i * size) == PT_INTERP)
}

/// A podman container (runc) of an image layout, removed with its image when dropped.
pub struct Container {
    /// The container's name.
    pub name: String,
    image: String,
}

impl Container {
    /// Starts `podman run -d --name <name> <options> <image> <args>`.
    ///
    /// podman would name an `oci:` image after its directory, which is no valid name when the
    /// path has a dot-directory in it, so the image goes to podman's storage under `name` first.
    pub fn start(name: &str, options: &[String], image: &str, args: &[String]) -> Self {
        // A container left by an earlier, killed run would hold the name.
        let _ = output(&tool("podman"), &["rm", "--force", name], None);
        let local = format!("localhost/{name}:test");
        let storage = format!("containers-storage:{local}");
        must(&tool("skopeo"), &["copy", "--quiet", image, &storage], None);
        let mut all = vec!["--runtime", "runc", "run", "--detach", "--name", name];
        all.extend(options.iter().map(String::as_str));
        all.push(&local);
        all.extend(args.iter().map(String::as_str));
        must(&tool("podman"), &all, None);
        Self {
            name: name.to_owned(),
            image: local,
        }
    }

    /// `podman exec`: runs `command` in the running container, as its user and with its
    /// environment (PATH included); its stdout, or what went wrong.
    pub fn exec(&self, command: &[&str]) -> Result<String, String> {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(command);
        output(&tool("podman"), &all, None)
    }

    /// The container's output so far, stdout then stderr (where the host logs).
    pub fn logs(&self) -> String {
        match std::process::Command::new(tool("podman"))
            .args(["logs", &self.name])
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("podman logs: {e}"),
        }
    }

    /// `podman stop` with `grace` seconds before SIGKILL; the exit code.
    pub fn stop(&self, grace: u32) -> i64 {
        must(
            &tool("podman"),
            &["stop", "--time", &grace.to_string(), &self.name],
            None,
        );
        let code = must(
            &tool("podman"),
            &["inspect", "--format", "{{.State.ExitCode}}", &self.name],
            None,
        );
        code.trim()
            .parse()
            .unwrap_or_else(|e| panic!("exit code {code:?}: {e}"))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("log of container {}:\n{}", self.name, self.logs());
        }
        let _ = output(&tool("podman"), &["rm", "--force", &self.name], None);
        let _ = output(&tool("podman"), &["rmi", "--force", &self.image], None);
    }
}
