//! A component in a ConfigMap's `binaryData`.

use std::io::Read as _;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::SourceError;
use crate::api::{Compression, ConfigMapSource};

/// The API server's limit on a ConfigMap's data (etcd's request limit, less overhead).
pub const CONFIGMAP_LIMIT: usize = 1 << 20;

/// Hint for components too large for a ConfigMap.
pub const USE_OCI: &str = "; a ConfigMap holds at most 1 MiB: put the component in an OCI registry instead (reconhost plugin install --oci <registry>/<repository>:<tag>, which sets source.oci)";

/// Reads the key and decompresses it, at most `max_bytes` after decompression.
pub async fn fetch(
    client: &kube::Client,
    source: &ConfigMapSource,
    max_bytes: usize,
) -> Result<Vec<u8>, SourceError> {
    let what = format!("ConfigMap {}/{}", source.namespace, source.name);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &source.namespace);
    let config_map = api
        .get_opt(&source.name)
        .await
        .map_err(|e| SourceError::Unavailable {
            what: what.clone(),
            message: e.to_string(),
        })?
        .ok_or_else(|| SourceError::NotFound { what: what.clone() })?;
    let key = &source.key;
    let Some(raw) = config_map
        .binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
    else {
        if config_map
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key(key))
        {
            return Err(SourceError::Invalid {
                what: format!("{what} key {key}"),
                reason: "the key is in data, which holds text; a component is binary and goes in binaryData".into(),
            });
        }
        return Err(SourceError::NotFound {
            what: format!("key {key} in the binaryData of {what}"),
        });
    };
    decompress(
        &format!("{what} key {key}"),
        raw,
        source.compression,
        max_bytes,
    )
}

/// The bytes as stored, or gunzipped, refusing anything that would exceed `max_bytes`.
pub fn decompress(
    what: &str,
    raw: Vec<u8>,
    compression: Compression,
    max_bytes: usize,
) -> Result<Vec<u8>, SourceError> {
    let too_large = || SourceError::TooLarge {
        what: what.to_owned(),
        limit: max_bytes,
        hint: "",
    };
    match compression {
        Compression::None if raw.len() > max_bytes => Err(too_large()),
        Compression::None => Ok(raw),
        Compression::Gzip => {
            let mut out = Vec::new();
            // One byte past the limit tells "exactly at the limit" from "larger", without ever
            // holding more than the limit of a gzip bomb.
            flate2::read::GzDecoder::new(raw.as_slice())
                .take(max_bytes as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| SourceError::Invalid {
                    what: what.to_owned(),
                    reason: format!("compression is gzip, but the bytes do not decompress: {e}"),
                })?;
            if out.len() > max_bytes {
                return Err(too_large());
            }
            Ok(out)
        }
    }
}

/// gzip-compresses a component (for `reconhost plugin install --configmap`).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .expect("writing into memory cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_should_round_trip_and_a_bomb_should_stop_at_the_limit() {
        let data = vec![7u8; 10_000];
        let packed = gzip(&data);
        assert!(packed.len() < 200, "zeros compress well");
        assert_eq!(
            decompress("x", packed.clone(), Compression::Gzip, 10_000).unwrap(),
            data
        );
        let error = decompress("x", packed, Compression::Gzip, 9_999).unwrap_err();
        assert_eq!(error.reason(), "TooLarge");
        let error = decompress("x", b"not gzip".to_vec(), Compression::Gzip, 100).unwrap_err();
        assert_eq!(error.reason(), "InvalidSource");
        assert!(decompress("x", vec![0; 101], Compression::None, 100).is_err());
    }
}
