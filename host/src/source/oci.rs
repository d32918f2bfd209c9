//! Components in OCI registries, as the CNCF wasm artifact layout (`wkg oci push`, `oras push …
//! plugin.wasm:application/wasm`) and Kubewarden's dialect publish them: a manifest with one wasm
//! layer, stored uncompressed, so the layer's digest is the component's.
//!
//! A pull reads the manifest the reference names, checks that its one wasm layer is the pinned
//! digest, and pulls that blob into memory under a byte cap. oci-client writes bytes before it
//! has checked their digest, so they are used only after both its check and ours passed.

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

use super::SourceError;
use super::signature::{self, PAYLOAD_MEDIA_TYPE, PublicKey, SIGNATURE_ANNOTATION, Signed};

/// The largest signature payload read (cosign's are a few hundred bytes).
const MAX_PAYLOAD: usize = 64 << 10;

/// The most signature layers looked at.
const MAX_SIGNATURES: usize = 16;

/// The cosign signatures of the manifest `digest` of `image`: the payload layers of the
/// manifest tagged `sha256-<hex>.sig` in the same repository (none if there is no such tag).
async fn signatures(
    client: &Client,
    image: &Reference,
    digest: &str,
    auth: &RegistryAuth,
    what: &str,
) -> Result<Vec<Signed>, SourceError> {
    let tag = format!("{}.sig", digest.replacen(':', "-", 1));
    let sig = Reference::with_tag(
        image.registry().to_owned(),
        image.repository().to_owned(),
        tag,
    );
    let manifest = match client.pull_image_manifest(&sig, auth).await {
        Ok((manifest, _)) => manifest,
        Err(e) => match classify(what, image.registry(), e) {
            SourceError::NotFound { .. } => return Ok(Vec::new()),
            other => return Err(other),
        },
    };
    let mut signed = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE)
        .take(MAX_SIGNATURES)
    {
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        let mut payload = Capped::new(MAX_PAYLOAD);
        client
            .pull_blob(&sig, layer, &mut payload)
            .await
            .map_err(|e| classify(what, image.registry(), e))?;
        signed.push(Signed {
            payload: payload.bytes,
            signature: signature.clone(),
        });
    }
    Ok(signed)
}

/// Layer media types taken as the component: the CNCF layout's, Kubewarden's (oci-client's
/// constant) and containerd runwasi's.
pub const WASM_LAYER_TYPES: [&str; 3] = [
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
];

/// The config media type `reconhost plugin push` writes (the CNCF layout's).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// How the host reaches registries. Every pull and push gets a client of its own: oci-client
/// keeps the first credentials it is given for a registry, and tokens per repository, for the
/// client's life, so a shared client would let one plugin's pull use another's credentials.
#[derive(Clone)]
pub struct Registry {
    insecure: Vec<String>,
}

impl Registry {
    /// Registries are reached over HTTPS, except those listed in `insecure` (plain HTTP).
    pub fn new(insecure: &[String]) -> Self {
        Self {
            insecure: insecure.to_vec(),
        }
    }

    fn client(&self) -> Client {
        let protocol = if self.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(self.insecure.clone())
        };
        Client::new(ClientConfig {
            protocol,
            user_agent: concat!("reconhost/", env!("CARGO_PKG_VERSION")),
            // One PUT per blob: a component is tens of MiB at most, so chunks would only add
            // round trips.
            use_monolithic_push: true,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            ..ClientConfig::default()
        })
    }

    /// The wasm layer of `reference` if it is `digest` (any, when `None`: to inspect an
    /// artifact), at most `max_bytes`. With `trust`, the manifest must carry a cosign signature
    /// that verifies with one of each list's keys (the operator's, the ReconcilePlugin's).
    pub async fn pull(
        &self,
        reference: &str,
        digest: Option<&str>,
        auth: &RegistryAuth,
        max_bytes: usize,
        trust: &[&[PublicKey]],
    ) -> Result<Vec<u8>, SourceError> {
        let what = format!("OCI artifact {reference}");
        let image: Reference = reference.parse().map_err(|e| SourceError::Invalid {
            what: what.clone(),
            reason: format!("not an image reference: {e}"),
        })?;
        let client = self.client();
        let (manifest, manifest_digest) = client
            .pull_image_manifest(&image, auth)
            .await
            .map_err(|e| classify(&what, image.registry(), e))?;
        let trust: Vec<&[PublicKey]> = trust.iter().copied().filter(|k| !k.is_empty()).collect();
        if !trust.is_empty() {
            let signed = signatures(&client, &image, &manifest_digest, auth, &what).await?;
            for keys in trust {
                signature::verify(&signed, &manifest_digest, keys).map_err(|e| {
                    SourceError::Unverified {
                        what: what.clone(),
                        reason: e.to_string(),
                    }
                })?;
            }
        }
        let wasm: Vec<_> = manifest
            .layers
            .iter()
            .filter(|l| WASM_LAYER_TYPES.contains(&l.media_type.as_str()))
            .collect();
        let layer = match wasm.as_slice() {
            [one] => *one,
            [] => {
                let types: Vec<&str> = manifest
                    .layers
                    .iter()
                    .map(|l| l.media_type.as_str())
                    .collect();
                return Err(SourceError::Invalid {
                    what,
                    reason: format!(
                        "it has no wasm layer (layers: {}); publish it with `reconhost plugin push`, `wkg oci push` or `oras push … plugin.wasm:application/wasm`",
                        if types.is_empty() {
                            "none".to_owned()
                        } else {
                            types.join(", ")
                        }
                    ),
                });
            }
            more => {
                return Err(SourceError::Invalid {
                    what,
                    reason: format!(
                        "it has {} wasm layers; a plugin artifact has exactly one",
                        more.len()
                    ),
                });
            }
        };
        if let Some(digest) = digest
            && layer.digest != digest
        {
            return Err(SourceError::DigestMismatch {
                what: format!("the wasm layer of {reference}"),
                expected: digest.to_owned(),
                actual: layer.digest.clone(),
            });
        }
        if usize::try_from(layer.size).map_or(true, |size| size > max_bytes) {
            return Err(SourceError::TooLarge {
                what: format!("the wasm layer of {reference} ({} bytes)", layer.size),
                limit: max_bytes,
                hint: "",
            });
        }
        let mut out = Capped::new(max_bytes);
        client
            .pull_blob(&image, layer, &mut out)
            .await
            .map_err(|e| match e {
                OciDistributionError::IoError(io)
                    if io.kind() == std::io::ErrorKind::FileTooLarge =>
                {
                    SourceError::TooLarge {
                        what: format!("the wasm layer of {reference}"),
                        limit: max_bytes,
                        hint: "",
                    }
                }
                other => classify(&what, image.registry(), other),
            })?;
        Ok(out.bytes)
    }

    /// Pushes `bytes` as a plugin artifact (the CNCF wasm layout) to `reference`; returns the
    /// layer digest, which is what a ReconcilePlugin pins.
    pub async fn push(
        &self,
        reference: &str,
        bytes: Vec<u8>,
        auth: &RegistryAuth,
    ) -> Result<String, SourceError> {
        let what = format!("OCI artifact {reference}");
        let image: Reference = reference.parse().map_err(|e| SourceError::Invalid {
            what: what.clone(),
            reason: format!("not an image reference: {e}"),
        })?;
        let layer = ImageLayer::new(bytes, WASM_LAYER_TYPES[0].to_owned(), None);
        let digest = layer.sha256_digest();
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [digest],
        });
        let config = Config::new(
            serde_json::to_vec(&config).expect("JSON"),
            CONFIG_MEDIA_TYPE.to_owned(),
            None,
        );
        self.client()
            .push(&image, &[layer], config, auth, None)
            .await
            .map_err(|e| match classify(&what, image.registry(), e) {
                SourceError::Unavailable { what, message } => {
                    SourceError::PushFailed { what, message }
                }
                other => other,
            })?;
        Ok(digest)
    }
}

/// Registry credentials for `reference` from a `kubernetes.io/dockerconfigjson` Secret in the
/// plugin's namespace. Only the entry for the reference's own registry is used, so the
/// credentials go to no other host.
pub async fn auth_from_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reference: &str,
) -> Result<RegistryAuth, SourceError> {
    let what = format!("pull Secret {namespace}/{name}");
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| SourceError::Unavailable {
            what: what.clone(),
            message: e.to_string(),
        })?
        .ok_or_else(|| SourceError::NotFound { what: what.clone() })?;
    let json = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| SourceError::Invalid {
            what: what.clone(),
            reason: "it has no .dockerconfigjson key (create it with kubectl create secret docker-registry)".into(),
        })?;
    let registry = reference
        .parse::<Reference>()
        .map(|r| r.resolve_registry().to_owned())
        .unwrap_or_default();
    docker_auth(&json.0, &registry).map_err(|reason| SourceError::Invalid { what, reason })
}

/// The credentials for `registry` in a docker config JSON (`{"auths": {host: {username,
/// password} | {auth: base64(user:password)}}}`); anonymous if it has no entry for it.
pub fn docker_auth(json: &[u8], registry: &str) -> Result<RegistryAuth, String> {
    let config: Value =
        serde_json::from_slice(json).map_err(|e| format!(".dockerconfigjson is not JSON: {e}"))?;
    let Some(auths) = config["auths"].as_object() else {
        return Err(".dockerconfigjson has no auths".into());
    };
    let host_of = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or("").to_owned()
    };
    let Some(entry) = auths
        .iter()
        .find(|(key, _)| host_of(key) == registry)
        .map(|(_, v)| v)
    else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let (Some(user), Some(password)) = (entry["username"].as_str(), entry["password"].as_str()) {
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    if let Some(auth) = entry["auth"].as_str() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .map_err(|e| format!("the auth of {registry} is not base64: {e}"))?;
        let text = String::from_utf8(decoded)
            .map_err(|_| format!("the auth of {registry} is not text"))?;
        let (user, password) = text
            .split_once(':')
            .ok_or_else(|| format!("the auth of {registry} is not user:password"))?;
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    if let Some(token) = entry["registrytoken"].as_str() {
        return Ok(RegistryAuth::Bearer(token.to_owned()));
    }
    Err(format!(
        "the entry for {registry} has no username/password, auth or registrytoken"
    ))
}

/// Sorts a registry error into what the condition should say.
fn classify(what: &str, registry: &str, error: OciDistributionError) -> SourceError {
    let not_found = match &error {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown
                    | OciErrorCode::BlobUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    };
    if not_found {
        return SourceError::NotFound {
            what: what.to_owned(),
        };
    }
    // reqwest hides the connection error behind "error sending request"; the chain says why.
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    if speaks_plain_http(&message) {
        return SourceError::PlainHttp {
            what: what.to_owned(),
            registry: registry.to_owned(),
        };
    }
    SourceError::Unavailable {
        what: what.to_owned(),
        message,
    }
}

/// Whether a failed HTTPS request met a server that answered in plain HTTP: TLS libraries then
/// report a record they cannot parse (rustls: "received corrupt message of type
/// InvalidContentType"; OpenSSL: "wrong version number"), which says nothing to someone who
/// only forgot to name a local registry as plain HTTP.
fn speaks_plain_http(message: &str) -> bool {
    [
        "InvalidContentType",
        "wrong version number",
        "HTTP response to HTTPS client",
    ]
    .iter()
    .any(|sign| message.contains(sign))
}

/// An in-memory writer that refuses to grow past a limit.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
}

impl Capped {
    fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
        }
    }
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.limit {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "the blob is larger than the limit",
            )));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_auth_should_take_only_the_entry_of_the_registry() {
        let json = br#"{"auths": {
            "https://other.example": {"username": "u1", "password": "p1"},
            "registry.example:5000": {"auth": "dTI6cDI="}
        }}"#;
        let auth = docker_auth(json, "registry.example:5000").unwrap();
        assert!(matches!(auth, RegistryAuth::Basic(u, p) if u == "u2" && p == "p2"));
        let auth = docker_auth(json, "other.example").unwrap();
        assert!(matches!(auth, RegistryAuth::Basic(u, _) if u == "u1"));
        assert!(matches!(
            docker_auth(json, "third.example").unwrap(),
            RegistryAuth::Anonymous
        ));
        assert!(docker_auth(b"{}", "x").unwrap_err().contains("no auths"));
    }
}

#[cfg(test)]
mod plain_http_tests {
    use super::*;

    #[test]
    fn a_tls_record_error_should_say_the_registry_speaks_plain_http() {
        let message = "error sending request: client error (Connect): received corrupt message of type InvalidContentType";
        assert!(speaks_plain_http(message));
        let error = SourceError::PlainHttp {
            what: "OCI artifact 127.0.0.1:5000/p:1".into(),
            registry: "127.0.0.1:5000".into(),
        };
        let shown = error.to_string();
        assert!(
            shown.starts_with("registry 127.0.0.1:5000 speaks plain HTTP")
                && shown.contains("--insecure-registry 127.0.0.1:5000")
                && shown.contains("insecureRegistries"),
            "{shown}"
        );
        assert!(!speaks_plain_http("connection refused"));
    }
}
