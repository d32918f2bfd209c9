//! Test plugin: a candidate version of `canary` that does exactly what the stable one
//! (rollout-v1) does: the same logic (src/canary.rs there), another version, so another digest.
#![allow(missing_docs, reason = "a test fixture")]

const VERSION: &str = "1.1.0";

include!("../../rollout-v1/src/canary.rs");
