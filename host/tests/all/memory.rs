//! The host's memory as an operator sees it, from outside the process.

use crate::common::{World, synced};

/// The host's allocator is jemalloc, whose background threads give freed pages back a second
/// after they are freed (its options in `main.rs`). Without those options (say, a jemalloc
/// update that renamed the symbol they are read from) nothing fails, but an idle host keeps
/// what its last burst freed until it allocates again.
#[tokio::test]
async fn the_host_should_give_freed_memory_back_from_its_allocators_background_threads() {
    let world = World::new("memory-purge").await;
    let host = world.host(&["webapp"], &[]).await;
    world.create_webapp("web", "nginx:1.27", 1).await;
    synced(&world.webapps(), "web").await;

    let pid = host.pid().expect("the host runs");
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the host's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    // One per arena in use, at most one per core.
    assert!(
        threads.iter().any(|name| name == "jemalloc_bg_thd"),
        "no thread of jemalloc's gives memory back; the host's threads: {threads:?}"
    );
}
