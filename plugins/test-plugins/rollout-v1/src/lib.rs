//! Test plugin: the stable version of `canary`, which the rollout tests replace progressively.
//! A `Canary` parent owns one ConfigMap `<parent>-canary` holding `spec.value`; its status
//! repeats the value. Every call logs `served`, so a test can tell from the host's log (which
//! adds the parent and the digest of the code) which revision served which parent.
#![allow(missing_docs, reason = "a test fixture")]

const VERSION: &str = "1.0.0";

include!("canary.rs");
