//! Small plugins through the SDK (issue 28): webapp built on `reconhost-sdk` beside
//! `runtime-lean-webapp` (the same logic on the raw contract, without `serde_json::Value` or
//! k8s-openapi), each with its component, compiled code, cold compile and per-call times.
//!
//! `RECONHOST_BENCH_BASELINE=<label>=<dir>[,<label>=<dir>...]` adds the same rows for the
//! components in each directory (a `make plugins` of another commit or profile, copied aside),
//! measured in this run beside the current ones: the before and after of a change, from one
//! run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reconhost::runtime::{Limits, Plugin, Runtime, RuntimeConfig};

use super::{Timings, median, parent, plugin_dir, request, three_ways, us};

/// The plugins compared, under every baseline and the current build.
const NAMES: [&str; 2] = ["webapp", "runtime-lean-webapp"];

/// What one component costs, loaded and called.
struct Row {
    label: String,
    component: usize,
    text: u64,
    cwasm: u64,
    compile: Duration,
    timings: Timings,
}

/// The directories measured: each baseline, then the current build (labelled "now").
fn sources() -> Vec<(String, PathBuf)> {
    let mut sources: Vec<(String, PathBuf)> = std::env::var("RECONHOST_BENCH_BASELINE")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (label, dir) = s
                .split_once('=')
                .expect("RECONHOST_BENCH_BASELINE: <label>=<dir>, comma-separated");
            let dir = PathBuf::from(dir);
            assert!(
                dir.is_dir(),
                "RECONHOST_BENCH_BASELINE: {} is not a directory (an absolute path: the bench \
                 runs in host/)",
                dir.display()
            );
            (label.to_owned(), dir)
        })
        .collect();
    sources.push(("now".to_owned(), plugin_dir()));
    sources
}

/// The size of the `.text` section of an ELF file (the compiled code of a `.cwasm`), read from
/// its section headers; `None` if it is not a 64-bit little-endian ELF file.
pub fn text_size(path: &Path) -> Option<u64> {
    let elf = std::fs::read(path).ok()?;
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let (shoff, shentsize) = (u64_at(0x28)? as usize, u16_at(0x3a)? as usize);
    let (shnum, shstrndx) = (u16_at(0x3c)? as usize, u16_at(0x3e)? as usize);
    let section = |i: usize| shoff + i * shentsize;
    let names = u64_at(section(shstrndx) + 0x18)? as usize;
    (0..shnum).find_map(|i| {
        let name = names + u32_at(section(i))? as usize;
        (elf.get(name..name + 6)? == b".text\0").then(|| u64_at(section(i) + 0x20))?
    })
}

/// The median of three cold compiles (each into an empty compiled-code cache) and the size of
/// the `.cwasm` the last one wrote, with its `.text`.
fn compile(name: &str, bytes: &[u8], scratch: &Path) -> (Duration, u64, u64) {
    let dir = scratch.join(format!("small-{name}"));
    let compile = median(
        (0..3)
            .map(|_| {
                let _ = std::fs::remove_dir_all(&dir);
                let runtime = Runtime::new(RuntimeConfig {
                    cache_dir: dir.clone(),
                    ..RuntimeConfig::default()
                })
                .unwrap();
                let start = Instant::now();
                Plugin::load_with_warm(&runtime, name, bytes, Limits::default(), 0).unwrap();
                start.elapsed()
            })
            .collect(),
    );
    let cwasm = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("the compiled-code cache holds the component");
    let size = std::fs::metadata(&cwasm).unwrap().len();
    let text = text_size(&cwasm).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    (compile, size, text)
}

/// Prints the table and returns the verdicts on issue 28's per-call target (webapp through
/// the SDK within 1.5× of the lean path, to the result with a pre-made instance).
pub fn small_plugins(runtime: &Runtime, scratch: &Path, n: usize) -> Vec<String> {
    println!();
    println!(
        "| webapp's logic (1 KiB parent) | build | component | compiled code (.text) | .cwasm | cold compile | to the result, pre-made | to the result, inline | whole call, pre-made | pre-made / lean path |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let request = request(parent(1 << 10));
    let mut rows = Vec::new();
    for (label, dir) in sources() {
        for name in NAMES {
            let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
                assert_ne!(label, "now", "build the plugins first: make plugins");
                continue;
            };
            let (compile, cwasm, text) = compile(name, &bytes, scratch);
            let warm = Plugin::load(runtime, name, &bytes, Limits::default()).unwrap();
            let inline =
                Plugin::load_with_warm(runtime, name, &bytes, Limits::default(), 0).unwrap();
            let timings = three_ways(&warm, &inline, &request, n);
            rows.push((
                name,
                Row {
                    label: label.clone(),
                    component: bytes.len(),
                    text,
                    cwasm,
                    compile,
                    timings,
                },
            ));
        }
    }
    let lean = |label: &str| {
        rows.iter()
            .find(|(name, row)| *name == "runtime-lean-webapp" && row.label == label)
            .or_else(|| {
                rows.iter()
                    .find(|(name, row)| *name == "runtime-lean-webapp" && row.label == "now")
            })
            .map(|(_, row)| row.timings.hot)
            .expect("the lean path was measured")
    };
    let mut verdicts = Vec::new();
    for (name, row) in &rows {
        let ratio = row.timings.hot.as_secs_f64() / lean(&row.label).as_secs_f64();
        println!(
            "| {name} | {} | {} KiB | {} KiB | {} KiB | {:.0} ms | {} | {} | {} | {ratio:.2}× |",
            row.label,
            row.component / 1024,
            row.text / 1024,
            row.cwasm / 1024,
            row.compile.as_secs_f64() * 1e3,
            us(row.timings.hot),
            us(row.timings.fresh),
            us(row.timings.whole),
        );
        if *name == "webapp" {
            verdicts.push(format!(
                "webapp through the SDK ({}) {ratio:.2}x the lean path per call (pre-made), target <= 1.5x: {}",
                row.label,
                if ratio <= 1.5 {
                    "met".to_owned()
                } else {
                    format!("missed by {:.2}x", ratio / 1.5)
                }
            ));
        }
    }
    verdicts
}
