//! Test plugin: leaves marks in every part of its memory an earlier call could leak through — a
//! static, the heap, and pages it grows the memory by — and reports the marks it found, to show
//! every call starts from a pristine instance whatever way the host resets used memory.
#![allow(missing_docs, reason = "a test fixture")]

use reconhost_sdk::{Error, Info, Kind, Reconciler, Request, Response, json};

struct Plugin;

/// Pages the plugin grows its memory by: 4 MiB, past any memory the host keeps resident.
const GROWN_PAGES: usize = 64;
const PAGE: usize = 64 << 10;
const MARK: u8 = 0xA5;

impl Reconciler for Plugin {
    fn info() -> Info {
        Info::new(
            "runtime-state-leak",
            Kind::new("test.reconhost.dev/v1", "Widget"),
        )
        .child(Kind::new("v1", "ConfigMap"))
    }

    fn reconcile(_request: Request) -> Result<Response, Error> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let seen = CALLS.fetch_add(1, Ordering::SeqCst);

        // A heap block written with a mark: the next instance's allocator hands out the same
        // addresses, and its `alloc_zeroed` must find zeroes there, not this call's mark.
        let mut heap = vec![0u8; 1 << 20];
        let heap_marked = heap.iter().filter(|b| **b == MARK).count();
        heap.fill(MARK);
        std::hint::black_box(&heap);

        Ok(Response::new().status(json!({
            "callsBefore": seen,
            "heapMarked": heap_marked,
            "grownPagesMarked": grown_pages_marked(),
        })))
    }
}

/// Grows linear memory by [`GROWN_PAGES`] and counts the 4 KiB pages of it that are not zero
/// (WebAssembly promises that grown memory is zeroed), then marks every one of them.
#[cfg(target_arch = "wasm32")]
fn grown_pages_marked() -> usize {
    let old = core::arch::wasm32::memory_grow(0, GROWN_PAGES);
    if old == usize::MAX {
        return usize::MAX;
    }
    // Memory the allocator does not know about: only this function touches it, through raw
    // pointers, which is defined for wasm linear memory.
    let base = (old * PAGE) as *mut u8;
    let mut marked = 0;
    for offset in (0..GROWN_PAGES * PAGE).step_by(4096) {
        // SAFETY: inside the memory just grown, which nothing else uses.
        unsafe {
            let p = base.add(offset);
            if p.read_volatile() != 0 {
                marked += 1;
            }
            p.write_volatile(MARK);
        }
    }
    marked
}

#[cfg(not(target_arch = "wasm32"))]
fn grown_pages_marked() -> usize {
    0
}

reconhost_sdk::export!(Plugin);
