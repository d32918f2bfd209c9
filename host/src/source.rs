//! Fetching a plugin's component from where its ReconcilePlugin says it is, and verifying it
//! against the pinned digest before anything else looks at it.
//!
//! - [`configmap`]: a key of a ConfigMap's `binaryData`, optionally gzip-compressed.
//! - [`oci`]: the wasm layer of an OCI artifact, pulled by its digest.
//! - [`file`](mod@file): a local file (`reconhost run --plugin`), read once.
//!
//! Every source is read in the plugin's namespace (the ServiceAccount's), so a ReconcilePlugin
//! cannot point the host at another team's ConfigMap or registry credentials. Every byte count
//! is capped, including what a gzip stream expands to, and bytes are used only after their
//! sha256 matched.

pub mod configmap;
pub mod file;
pub mod oci;
pub mod signature;

use std::time::{Duration, Instant};

use crate::api::Source;
use crate::runtime::sha256_hex;

/// The default cap on a component's size: larger than any component measured (Python, 18.5 MB;
/// JavaScript, 12 MB), small enough that a hostile source cannot exhaust the host's memory.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// A source could not deliver the pinned component.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The ConfigMap, key, Secret, image or layer does not exist.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The component is larger than the host accepts, or than the source can hold.
    #[error("{what} is larger than {limit} bytes{hint}")]
    TooLarge {
        /// What was too large.
        what: String,
        /// The limit in bytes.
        limit: usize,
        /// What to do instead, or empty.
        hint: &'static str,
    },
    /// The bytes are not the pinned ones.
    #[error("{what} has digest {actual}, but the ReconcilePlugin pins {expected}")]
    DigestMismatch {
        /// What was fetched.
        what: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what was found.
        actual: String,
    },
    /// The source exists but is not usable as it is (wrong layer type, bad gzip, bad Secret).
    #[error("{what}: {reason}")]
    Invalid {
        /// What is wrong.
        what: String,
        /// Why.
        reason: String,
    },
    /// A signature was asked for and none verifies.
    #[error("{what}: {reason}")]
    Unverified {
        /// What was fetched.
        what: String,
        /// What the signatures were found to be.
        reason: String,
    },
    /// Asking failed (the registry or API server is unreachable, refused, or errored).
    #[error("fetching {what}: {message}")]
    Unavailable {
        /// What was being fetched.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// Pushing to a registry failed.
    #[error("pushing {what}: {message}")]
    PushFailed {
        /// What was being pushed.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// The registry was asked over HTTPS and answered in plain HTTP.
    #[error(
        "registry {registry} speaks plain HTTP, not HTTPS ({what}): name it with --insecure-registry {registry} (the host: `reconhost run --insecure-registry {registry}`, or the chart's value insecureRegistries)"
    )]
    PlainHttp {
        /// What was being fetched or pushed.
        what: String,
        /// The registry (`host:port`).
        registry: String,
    },
}

impl SourceError {
    /// The condition reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "SourceNotFound",
            Self::TooLarge { .. } => "TooLarge",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::Invalid { .. } => "InvalidSource",
            Self::Unverified { .. } => "SignatureNotVerified",
            Self::Unavailable { .. } => "FetchFailed",
            Self::PushFailed { .. } => "PushFailed",
            // Still a fetch that failed, as conditions and alerts have known it.
            Self::PlainHttp { .. } => "FetchFailed",
        }
    }
}

/// Settings of the sources.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Registries (`host` or `host:port`) reached over plain HTTP instead of HTTPS. Only ever
    /// what the operator lists: a plugin author cannot downgrade the transport.
    pub insecure_registries: Vec<String>,
    /// The largest component accepted, in bytes.
    pub max_bytes: usize,
    /// The operator's keys: when there are any, every plugin must be an OCI artifact with a
    /// cosign signature one of them verifies (`--plugin-public-key`).
    pub trusted_keys: Vec<signature::PublicKey>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            insecure_registries: Vec::new(),
            max_bytes: DEFAULT_MAX_BYTES,
            trusted_keys: Vec::new(),
        }
    }
}

/// A verified component.
#[derive(Debug)]
pub struct Fetched {
    /// Its bytes, whose sha256 is the pinned digest.
    pub bytes: Vec<u8>,
    /// `configmap` or `oci`, for metrics.
    pub kind: &'static str,
    /// How long fetching and verifying took.
    pub elapsed: Duration,
}

/// The sources of one host.
#[derive(Clone)]
pub struct Sources {
    client: kube::Client,
    oci: oci::Registry,
    max_bytes: usize,
    trusted_keys: Vec<signature::PublicKey>,
}

impl Sources {
    /// Sources reading ConfigMaps and Secrets with `client`.
    pub fn new(client: kube::Client, config: &SourceConfig) -> Self {
        Self {
            oci: oci::Registry::new(&config.insecure_registries),
            client,
            max_bytes: config.max_bytes,
            trusted_keys: config.trusted_keys.clone(),
        }
    }

    /// Fetches the component `source` names, in the plugin's namespace `namespace`, and checks
    /// its digest.
    pub async fn fetch(&self, source: &Source, namespace: &str) -> Result<Fetched, SourceError> {
        let start = Instant::now();
        let (bytes, kind, what) = match (&source.config_map, &source.oci) {
            (Some(cm), None) if !self.trusted_keys.is_empty() => {
                return Err(SourceError::Unverified {
                    what: format!("ConfigMap {}/{}", cm.namespace, cm.name),
                    reason: "the host requires signed plugins (--plugin-public-key), and a ConfigMap carries no signature: push the component to a registry and sign it with cosign".into(),
                });
            }
            (Some(cm), None) => {
                let bytes = configmap::fetch(&self.client, cm, self.max_bytes).await?;
                let what = format!("ConfigMap {}/{} key {}", cm.namespace, cm.name, cm.key);
                (bytes, "configmap", what)
            }
            (None, Some(oci)) => {
                let auth = match &oci.pull_secret_ref {
                    Some(secret) => {
                        oci::auth_from_secret(&self.client, namespace, &secret.name, &oci.reference)
                            .await?
                    }
                    None => oci_client::secrets::RegistryAuth::Anonymous,
                };
                let asked = oci
                    .public_keys
                    .iter()
                    .flatten()
                    .map(|pem| signature::PublicKey::from_pem(pem))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SourceError::Invalid {
                        what: "spec.source.oci.publicKeys".into(),
                        reason: e.to_string(),
                    })?;
                let bytes = self
                    .oci
                    .pull(
                        &oci.reference,
                        Some(&source.digest),
                        &auth,
                        self.max_bytes,
                        &[&self.trusted_keys, &asked],
                    )
                    .await?;
                (bytes, "oci", format!("the wasm layer of {}", oci.reference))
            }
            _ => {
                return Err(SourceError::Invalid {
                    what: "spec.source".into(),
                    reason: "exactly one of configMap and oci must be set".into(),
                });
            }
        };
        verify(&what, &bytes, &source.digest)?;
        Ok(Fetched {
            bytes,
            kind,
            elapsed: start.elapsed(),
        })
    }
}

/// Checks that `bytes` have the digest `expected` (`sha256:<hex>`).
pub fn verify(what: &str, bytes: &[u8], expected: &str) -> Result<(), SourceError> {
    let actual = format!("sha256:{}", sha256_hex(bytes));
    if actual == expected {
        Ok(())
    } else {
        Err(SourceError::DigestMismatch {
            what: what.to_owned(),
            expected: expected.to_owned(),
            actual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_should_name_both_digests() {
        let digest = format!("sha256:{}", sha256_hex(b"abc"));
        assert!(verify("x", b"abc", &digest).is_ok());
        let error = verify("ConfigMap p/w key plugin.wasm", b"abd", &digest).unwrap_err();
        assert_eq!(error.reason(), "DigestMismatch");
        let text = error.to_string();
        assert!(
            text.contains(&digest) && text.contains("ConfigMap p/w"),
            "{text}"
        );
    }
}
