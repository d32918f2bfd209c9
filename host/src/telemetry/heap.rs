//! A heap profile of the running host, for `make bench-heap`: with the `heap-profile` feature
//! the binary's allocator is dhat's, and SIGUSR1 writes every live allocation, by the call
//! stack that made it, to `$RECONHOST_HEAP_PROFILE` (default `dhat-heap.json`), then stops
//! profiling. dhat's viewer reads the file; the scale benchmark sums it by where in the host
//! the bytes were allocated.
//!
//! A signal rather than the end of the process: what matters is what a host at steady state
//! holds, and at exit everything is freed. Without the feature, nothing here is compiled in.

use std::sync::Mutex;

/// The profiler while it runs; dropping it writes the profile.
static PROFILER: Mutex<Option<dhat::Profiler>> = Mutex::new(None);

/// Starts profiling the heap and listens for SIGUSR1 to write the profile. Call once, early in
/// `main`, within the Tokio runtime.
pub fn start() {
    let file =
        std::env::var_os("RECONHOST_HEAP_PROFILE").unwrap_or_else(|| "dhat-heap.json".into());
    // dhat keeps ten frames by default: in an async host those are the allocator's and
    // serde's, never the host function that asked.
    let profiler = dhat::Profiler::builder()
        .file_name(file)
        .trim_backtraces(Some(48))
        .build();
    *PROFILER.lock().expect("heap profiler lock poisoned") = Some(profiler);
    tokio::spawn(async {
        let Ok(mut signal) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        else {
            tracing::warn!("heap profile: cannot listen for SIGUSR1; no profile will be written");
            return;
        };
        signal.recv().await;
        let profiler = PROFILER.lock().expect("heap profiler lock poisoned").take();
        // Writing resolves every stack's symbols: seconds, off the async workers.
        let _ = tokio::task::spawn_blocking(move || drop(profiler)).await;
        tracing::info!("heap profile written");
    });
}
