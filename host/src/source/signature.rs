//! Cosign signatures of plugin artifacts, verified with a public key: the format `cosign sign
//! --key` writes (cosign 2's default). A signature is an OCI manifest under the tag
//! `sha256-<manifest digest>.sig` of the same repository; each of its layers is a "simple
//! signing" payload (JSON naming the signed manifest's digest) with the base64 ECDSA P-256
//! signature of the payload's bytes in the annotation `dev.cosignproject.cosign/signature`.
//!
//! The artifact is trusted when one payload names the manifest the host is about to pull from
//! and its signature verifies under one of the trusted keys; the wasm layer's own digest is
//! then checked against the ReconcilePlugin's pin as for any artifact.

use base64::Engine as _;
use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use serde_json::Value;

/// The media type of a simple-signing payload layer.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// The layer annotation that holds the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The DER prefix of a P-256 public key's SubjectPublicKeyInfo, before the 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A trusted public key (an ECDSA P-256 key, as `cosign generate-key-pair` makes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    point: Vec<u8>,
}

/// Why a key or a signature is not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The key is not a PEM `PUBLIC KEY` of an ECDSA P-256 key.
    #[error("the public key is not a PEM ECDSA P-256 public key (cosign.pub): {0}")]
    BadKey(String),
    /// No signature verified.
    #[error("{0}")]
    Unverified(String),
}

impl PublicKey {
    /// A key from its PEM text (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &str) -> Result<Self, SignatureError> {
        let body: String = pem
            .lines()
            .map(str::trim)
            .skip_while(|l| *l != "-----BEGIN PUBLIC KEY-----")
            .skip(1)
            .take_while(|l| *l != "-----END PUBLIC KEY-----")
            .collect();
        if body.is_empty() {
            return Err(SignatureError::BadKey("no PUBLIC KEY block".into()));
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| SignatureError::BadKey(format!("base64: {e}")))?;
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(Self {
                point: point.to_vec(),
            }),
            _ => Err(SignatureError::BadKey(
                "not an uncompressed P-256 key (cosign keys are)".into(),
            )),
        }
    }

    /// Whether `signature` (DER) is this key's over `message`.
    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(message, signature)
            .is_ok()
    }
}

/// One signature layer: its payload's bytes and its base64 signature.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The payload, as stored.
    pub payload: Vec<u8>,
    /// The annotation's value.
    pub signature: String,
}

/// Checks that one of `signed` is a valid signature, by one of `keys`, of the manifest
/// `manifest_digest`. The error says what was wrong with each.
pub fn verify(
    signed: &[Signed],
    manifest_digest: &str,
    keys: &[PublicKey],
) -> Result<(), SignatureError> {
    if signed.is_empty() {
        return Err(SignatureError::Unverified(
            "it has no cosign signature (no sha256-<digest>.sig manifest with a signed payload)"
                .into(),
        ));
    }
    let mut why = Vec::new();
    for one in signed {
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(one.signature.trim())
        else {
            why.push("a signature that is not base64".to_owned());
            continue;
        };
        if !keys.iter().any(|k| k.verifies(&one.payload, &signature)) {
            why.push("a signature no trusted key made".to_owned());
            continue;
        }
        let payload: Value = match serde_json::from_slice(&one.payload) {
            Ok(payload) => payload,
            Err(e) => {
                why.push(format!("a signed payload that is not JSON: {e}"));
                continue;
            }
        };
        let signs = &payload["critical"]["image"]["docker-manifest-digest"];
        if payload["critical"]["type"] != "cosign container image signature" {
            why.push("a signed payload of another type".to_owned());
        } else if signs != manifest_digest {
            why.push(format!(
                "a valid signature of another manifest ({signs}, not {manifest_digest})"
            ));
        } else {
            return Ok(());
        }
    }
    Err(SignatureError::Unverified(format!(
        "no signature of manifest {manifest_digest} verifies with the trusted keys: found {}",
        why.join("; ")
    )))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};

    /// A key pair: signs payloads, and its public key as PEM.
    pub(crate) struct Signer(EcdsaKeyPair);

    impl Signer {
        pub(crate) fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
            Self(
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
                    .unwrap(),
            )
        }

        pub(crate) fn pem(&self) -> String {
            let mut der = P256_SPKI_PREFIX.to_vec();
            der.extend_from_slice(self.0.public_key().as_ref());
            let body = base64::engine::general_purpose::STANDARD.encode(der);
            format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
        }

        pub(crate) fn sign(&self, manifest_digest: &str) -> Signed {
            let payload = serde_json::to_vec(&serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": "127.0.0.1:5000/plugins/x"},
                    "image": {"docker-manifest-digest": manifest_digest},
                    "type": "cosign container image signature"
                },
                "optional": null
            }))
            .unwrap();
            let signature = self.0.sign(&SystemRandom::new(), &payload).unwrap();
            Signed {
                signature: base64::engine::general_purpose::STANDARD.encode(signature.as_ref()),
                payload,
            }
        }
    }

    #[test]
    fn a_signature_should_verify_only_for_its_manifest_and_its_key() {
        let (ours, theirs) = (Signer::new(), Signer::new());
        let key = PublicKey::from_pem(&ours.pem()).unwrap();
        let manifest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            verify(
                &[ours.sign(&manifest)],
                &manifest,
                std::slice::from_ref(&key)
            ),
            Ok(())
        );
        let other = format!("sha256:{}", "b".repeat(64));
        let wrong =
            verify(&[ours.sign(&other)], &manifest, std::slice::from_ref(&key)).unwrap_err();
        assert!(wrong.to_string().contains("another manifest"), "{wrong}");
        let foreign = verify(
            &[theirs.sign(&manifest)],
            &manifest,
            std::slice::from_ref(&key),
        )
        .unwrap_err();
        assert!(foreign.to_string().contains("no trusted key"), "{foreign}");
        let mut tampered = ours.sign(&manifest);
        tampered.payload[5] ^= 1;
        assert!(verify(&[tampered], &manifest, std::slice::from_ref(&key)).is_err());
        let none = verify(&[], &manifest, std::slice::from_ref(&key)).unwrap_err();
        assert!(none.to_string().contains("no cosign signature"), "{none}");
        assert_eq!(
            verify(
                &[theirs.sign(&manifest), ours.sign(&manifest)],
                &manifest,
                &[key]
            ),
            Ok(()),
            "one good signature among others is enough"
        );
    }

    #[test]
    fn keys_should_be_pem_p256_public_keys() {
        assert!(PublicKey::from_pem(&Signer::new().pem()).is_ok());
        assert!(matches!(
            PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"),
            Err(SignatureError::BadKey(_))
        ));
        assert!(PublicKey::from_pem("hello").is_err());
    }
}
