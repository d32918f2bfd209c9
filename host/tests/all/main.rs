//! reconhost's integration tests, as one test binary (wasmtime's `tests/all` shape): the
//! dependencies are compiled and linked once rather than once per suite, and the harness keeps
//! its test threads busy across suites instead of idling at the end of each. The helpers the
//! suites share with the cluster benchmarks are `reconhost_tests::world`, known here as `common`.
//!
//! Every module is a suite; `cargo test --test all -- <suite>::` runs one (`make test-faults`
//! runs `faults::`). Most suites share the control plane that `make test` starts
//! (`reconhost-cluster exec`), each test in a namespace of its own; suites that install
//! ReconcilePlugins, the chart or the admission policy serialize on
//! [`common::plugins::exclusive`], since those are cluster-wide. The fault suite starts a control
//! plane of its own per scenario.

use reconhost_tests::world as common;

mod api;
mod cluster_scoped;
mod control_loop;
mod control_restart;
mod control_scale;
mod corpus;
mod decorator;
mod faults;
mod grants;
mod host_share;
mod hostile;
mod identity;
mod image;
mod init;
mod inspect;
mod install;
mod languages;
mod leader;
mod lifecycle;
mod lifecycle_sources;
mod memory;
mod monitoring;
mod order;
mod render;
mod rollout;
mod rollout_sharded;
mod runtime;
mod selection;
mod signed;
mod status_schema;
mod traces;
