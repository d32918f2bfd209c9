//! Checks what a 0.2 plugin says about order and about its parent's metadata: readiness checks
//! with a path and a parseable value, and label and annotation keys that are well-formed and not
//! the host's.

use std::collections::BTreeMap;

use super::invalid;
use crate::model::{ParentMetadata, ReadyCheck, printable};
use crate::runtime::contract::parsed;
use crate::runtime::error::CallErrorKind;

/// Checks one child may carry: each is evaluated on every reconcile that waits on the child.
pub const MAX_CHECKS: usize = 16;

/// Longest dotted path in a check.
pub const MAX_PATH: usize = 256;

/// Most keys a plugin may set on its parent, labels and annotations together.
pub const MAX_METADATA_KEYS: usize = 64;

/// Largest annotation value (all of a parent's annotations must stay under 256 KiB).
pub const MAX_ANNOTATION_VALUE: usize = 16 << 10;

/// The prefix of the host's own label and annotation keys, which no plugin may set.
const HOST_PREFIX: &str = "reconhost.dev/";

/// `checks` with their values parsed; `path` names them in errors.
pub fn checks(
    path: &str,
    checks: Vec<ReadyCheck<String>>,
) -> Result<Vec<ReadyCheck>, CallErrorKind> {
    if checks.len() > MAX_CHECKS {
        return Err(invalid(
            path,
            format!("{} checks, more than {MAX_CHECKS}", checks.len()),
        ));
    }
    checks
        .into_iter()
        .enumerate()
        .map(|(i, check)| {
            let at = format!("{path}[{i}]");
            check_one(&check).map_err(|reason| invalid(&at, reason))?;
            parsed(check).map_err(|reason| invalid(&at, reason))
        })
        .collect()
}

/// What is wrong with one check, if anything (a value that is not JSON is found by parsing).
pub fn check_one<V>(check: &ReadyCheck<V>) -> Result<(), String> {
    match check {
        ReadyCheck::Condition { type_, .. } if type_.is_empty() || type_.len() > 316 => {
            Err("a condition check needs a type".into())
        }
        ReadyCheck::Field { path, operand, .. } => {
            let field = match operand {
                crate::model::Operand::Field(other) => Some(other.as_str()),
                crate::model::Operand::Value(_) => None,
            };
            for p in std::iter::once(path.as_str()).chain(field) {
                if p.is_empty() || p.len() > MAX_PATH || p.split('.').any(str::is_empty) {
                    return Err(format!(
                        "{:?} is not a dotted path (e.g. status.readyReplicas)",
                        printable(p, 64)
                    ));
                }
            }
            Ok(())
        }
        ReadyCheck::Condition { .. } => Ok(()),
    }
}

/// Checks the labels and annotations a plugin sets on its parent.
pub fn parent_metadata(metadata: &ParentMetadata) -> Result<(), CallErrorKind> {
    let count = metadata.labels.len() + metadata.annotations.len();
    if count > MAX_METADATA_KEYS {
        return Err(invalid(
            "parent-metadata",
            format!("{count} keys, more than {MAX_METADATA_KEYS}"),
        ));
    }
    keys("parent-metadata.labels", &metadata.labels, |value| {
        let ok = value.is_empty()
            || (value.len() <= 63
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
        ok.then_some(()).ok_or_else(|| {
            "not a label value (at most 63 letters, digits, '-', '_', '.')".to_owned()
        })
    })?;
    keys(
        "parent-metadata.annotations",
        &metadata.annotations,
        |value| {
            if value.len() > MAX_ANNOTATION_VALUE {
                Err(format!(
                    "{} bytes, more than {MAX_ANNOTATION_VALUE}",
                    value.len()
                ))
            } else {
                Ok(())
            }
        },
    )
}

fn keys(
    path: &str,
    map: &BTreeMap<String, String>,
    value_ok: impl Fn(&str) -> Result<(), String>,
) -> Result<(), CallErrorKind> {
    for (key, value) in map {
        let at = format!("{path}[{:?}]", printable(key, 64));
        qualified(key).map_err(|reason| invalid(&at, reason))?;
        if key.starts_with(HOST_PREFIX)
            || key
                .split_once('/')
                .is_some_and(|(prefix, _)| prefix.ends_with(".reconhost.dev"))
        {
            return Err(invalid(&at, "keys under reconhost.dev/ are the host's"));
        }
        value_ok(value).map_err(|reason| invalid(&at, reason))?;
    }
    Ok(())
}

/// A qualified name as Kubernetes requires of label and annotation keys: an optional DNS
/// subdomain prefix and `/`, then a name of at most 63 letters, digits, `-`, `_`, `.` that
/// starts and ends with a letter or digit.
fn qualified(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    if name_ok && prefix_ok {
        Ok(())
    } else {
        Err("not a qualified key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_', '.')".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Comparison, ConditionStatus, Operand};
    use serde_json::json;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ParentMetadata {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        ParentMetadata {
            labels: map(labels),
            annotations: map(annotations),
        }
    }

    fn path_of(error: CallErrorKind) -> String {
        match error {
            CallErrorKind::InvalidResponse { path, .. } => path,
            other => panic!("not an invalid response: {other:?}"),
        }
    }

    #[test]
    fn a_check_value_should_be_parsed_and_a_bad_one_named_by_its_path() {
        let ok = checks(
            "children[0].ready-when",
            vec![
                ReadyCheck::Field {
                    path: "status.phase".into(),
                    comparison: Comparison::Equal,
                    operand: Operand::Value("\"Running\"".into()),
                },
                ReadyCheck::Condition {
                    type_: "Available".into(),
                    status: ConditionStatus::True,
                },
            ],
        )
        .unwrap();
        assert_eq!(
            ok[0],
            ReadyCheck::Field {
                path: "status.phase".into(),
                comparison: Comparison::Equal,
                operand: Operand::Value(json!("Running")),
            }
        );
        let not_json = ReadyCheck::Field {
            path: "status.phase".into(),
            comparison: Comparison::Equal,
            operand: Operand::Value("Running".into()),
        };
        let error = checks("children[2].ready-when", vec![not_json]).unwrap_err();
        assert_eq!(path_of(error), "children[2].ready-when[0]");
        let bad_path: ReadyCheck = ReadyCheck::Field {
            path: "status..phase".into(),
            comparison: Comparison::Equal,
            operand: Operand::Field("".into()),
        };
        assert!(check_one(&bad_path).is_err());
    }

    #[test]
    fn parent_metadata_should_refuse_the_hosts_keys_and_malformed_ones() {
        assert!(parent_metadata(&meta(&[("team", "a")], &[("example.com/owner", "x y")])).is_ok());
        for (labels, annotations, at) in [
            (
                &[("reconhost.dev/decorator", "x")][..],
                &[][..],
                "parent-metadata.labels[\"reconhost.dev/decorator\"]",
            ),
            (
                &[][..],
                &[("finalizers.reconhost.dev/x", "y")][..],
                "parent-metadata.annotations[\"finalizers.reconhost.dev/x\"]",
            ),
            (
                &[("-bad", "x")][..],
                &[][..],
                "parent-metadata.labels[\"-bad\"]",
            ),
            (
                &[("team", "not a value")][..],
                &[][..],
                "parent-metadata.labels[\"team\"]",
            ),
            (
                &[("Upper.Case/x", "v")][..],
                &[][..],
                "parent-metadata.labels[\"Upper.Case/x\"]",
            ),
        ] {
            let error = parent_metadata(&meta(labels, annotations)).unwrap_err();
            assert_eq!(path_of(error), at);
        }
    }
}
