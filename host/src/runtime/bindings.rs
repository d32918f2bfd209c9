//! The host's only `bindgen!`: Rust types and traits for the plugin contract, one module per
//! released WIT version. A new contract version gets a new module beside the others, and a variant of
//! [`super::contract::Contract`], which picks it by the version a component imports.

/// `reconhost:plugin@0.1.0`.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        world: "reconciler",
        path: "../wit/reconhost-plugin@0.1.0",
        // Host imports return `wasmtime::Result`, so a host-side failure (a log flood) can
        // trap the call; domain failures travel in the WIT `read-error`.
        imports: { default: trappable },
    });

    pub use reconhost::plugin::host::Host;
    pub use reconhost::plugin::types;
}

/// `reconhost:plugin@0.2.0`.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "reconciler",
        path: "../wit/reconhost-plugin@0.2.0",
        imports: { default: trappable },
    });

    pub use reconhost::plugin::host::Host;
    pub use reconhost::plugin::types;
}
