#!/usr/bin/env python3
"""Writes reconhost's container image as an OCI image layout, with no daemon and no tool but the
Python standard library, reproducibly: the same binary gives the same digest.

    mkimage.py BINARY CA_BUNDLE OUT_DIR TAG [CONTEXT_DIR]

With CONTEXT_DIR it also writes the build context of deploy/image/Containerfile (the same
files), so the image can be built the usual way too.

The image holds one layer: the static `reconhost` binary at /reconhost and a symlink to it,
/kubectl-reconhost (the binary answers to that name as a kubectl plugin, and PATH is /, so
`kubectl-reconhost status` runs in the container as it does beside kubectl), a CA bundle for HTTPS
registries at /etc/ssl/certs/ca-certificates.crt, /etc/passwd and /etc/group with the
unprivileged user 65532 (nonroot), a world-writable /tmp and /var/cache/reconhost (where the
chart mounts a volume for compiled plugins). It runs as 65532:65532, entrypoint `reconhost`,
command `run`. Every timestamp is the epoch and every owner root, so nothing about the build
machine or the time leaks into the digest.
"""

import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

EPOCH = 0
USER = "65532:65532"
CACHE = "/var/cache/reconhost"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def entry(
    tar: tarfile.TarFile, name: str, mode: int, data: bytes | None = None, link: str | None = None
) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = mode
    if link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


# The kubectl plugin's name for the binary (reconhost::inspect::KUBECTL_PLUGIN), a relative
# symlink beside it: a second copy would double the layer.
KUBECTL_PLUGIN = ("kubectl-reconhost", "reconhost")


GROUP = b"root:x:0:\nnonroot:x:65532:\n"
PASSWD = (
    b"root:x:0:0:root:/root:/sbin/nologin\n"
    b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)


def layer(binary: bytes, ca_bundle: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        # Parents before children, in a fixed order.
        for d in ["etc", "etc/ssl", "etc/ssl/certs", "var", "var/cache"]:
            entry(tar, d, 0o755)
        entry(tar, "etc/group", 0o644, GROUP)
        entry(tar, "etc/passwd", 0o644, PASSWD)
        entry(tar, "etc/ssl/certs/ca-certificates.crt", 0o644, ca_bundle)
        entry(tar, "reconhost", 0o755, binary)
        entry(tar, KUBECTL_PLUGIN[0], 0o777, link=KUBECTL_PLUGIN[1])
        entry(tar, "tmp", 0o1777)
        entry(tar, CACHE.lstrip("/"), 0o1777)
    return out.getvalue()


def blob(out_dir: str, data: bytes) -> dict:
    d = digest(data)
    path = os.path.join(out_dir, "blobs", "sha256", d.split(":", 1)[1])
    with open(path, "wb") as f:
        f.write(data)
    return {"digest": d, "size": len(data)}


def writable_dirs() -> bytes:
    """The world-writable directories as a tar: Containerfile's COPY cannot set a directory's own
    mode (`--chmod` applies to what is copied into it), and ADD keeps the modes in a tar."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ["var", "var/cache"]:
            entry(tar, d, 0o755)
        entry(tar, "tmp", 0o1777)
        entry(tar, CACHE.lstrip("/"), 0o1777)
    return out.getvalue()


def kubectl_plugin() -> bytes:
    """The kubectl plugin's symlink as a tar: Containerfile's COPY would follow a symlink in the
    context and copy the binary again; ADD unpacks a tar's symlink as one."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entry(tar, KUBECTL_PLUGIN[0], 0o777, link=KUBECTL_PLUGIN[1])
    return out.getvalue()


def context(directory: str, binary: bytes, ca_bundle: bytes) -> None:
    os.makedirs(directory, exist_ok=True)
    files = [
        ("reconhost", binary),
        ("ca-certificates.crt", ca_bundle),
        ("passwd", PASSWD),
        ("group", GROUP),
        ("writable-dirs.tar", writable_dirs()),
        ("kubectl-plugin.tar", kubectl_plugin()),
    ]
    for name, data in files:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main() -> None:
    binary_path, ca_path, out_dir, tag = sys.argv[1:5]
    with open(binary_path, "rb") as f:
        binary = f.read()
    with open(ca_path, "rb") as f:
        ca_bundle = f.read()
    version = os.environ.get("RECONHOST_VERSION", "0.1.0")
    os.makedirs(os.path.join(out_dir, "blobs", "sha256"), exist_ok=True)

    tar = layer(binary, ca_bundle)
    gz = io.BytesIO()
    # mtime=0 and no file name: gzip's header holds neither the time nor the path.
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6, filename="") as z:
        z.write(tar)
    layer_desc = blob(out_dir, gz.getvalue())
    layer_desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"

    created = "1970-01-01T00:00:00Z"
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": ["/reconhost"],
            "Cmd": ["run"],
            "Env": [
                "PATH=/",
                f"RECONHOST_CACHE={CACHE}",
                "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
            ],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": "reconhost",
                "org.opencontainers.image.description": "Kubernetes controller host running reconcile logic as sandboxed WebAssembly components",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(tar)]},
        "history": [{"created": created, "created_by": "scripts/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_desc = blob(out_dir, config_bytes)
    config_desc["mediaType"] = "application/vnd.oci.image.config.v1+json"

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_desc = blob(out_dir, manifest_bytes)
    manifest_desc["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": tag}
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}

    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]}
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True, separators=(",", ":"))
    with open(os.path.join(out_dir, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    if len(sys.argv) > 5:
        context(sys.argv[5], binary, ca_bundle)
    print(manifest_desc["digest"])


if __name__ == "__main__":
    main()
