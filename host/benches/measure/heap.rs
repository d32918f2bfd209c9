//! Reads a dhat heap profile (`reconhost::telemetry::heap`) and sums the bytes still live when
//! it was written by where in the host they were allocated: the innermost frame of the host's
//! own code on each allocation's stack, inlined or not, as `function@file:line` (a dependency's
//! or the standard library's frames above it count for the host's call that led there). Stacks
//! with no host frame go under the crate of their innermost frame outside the standard library.

use std::collections::HashMap;
use std::path::Path;

/// Live bytes and blocks of one place.
#[derive(Debug, Default, Clone, Copy)]
pub struct Live {
    /// Bytes allocated there and not yet freed.
    pub bytes: u64,
    /// Allocations (blocks) that make them up.
    pub blocks: u64,
}

/// A profile summed by place, largest first.
pub struct Profile {
    /// Every live byte of the process's heap.
    pub total: Live,
    /// By the host function that allocated (see the module doc), largest first.
    pub by_site: Vec<(String, Live)>,
}

impl Profile {
    /// Reads the profile dhat wrote at `path`; `None` while it is not there or not whole.
    pub fn read(path: &Path) -> Option<Self> {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        let frames: Vec<&str> = json["ftbl"]
            .as_array()
            .expect("a dhat profile has a frame table")
            .iter()
            .map(|f| f.as_str().unwrap_or(""))
            .collect();
        let mut total = Live::default();
        let mut sites: HashMap<String, Live> = HashMap::new();
        let mut known = HashMap::new();
        for pp in json["pps"]
            .as_array()
            .expect("a dhat profile has program points")
        {
            let bytes = pp["eb"].as_u64().unwrap_or(0);
            if bytes == 0 {
                continue;
            }
            let blocks = pp["ebk"].as_u64().unwrap_or(0);
            let stack: Vec<&str> = pp["fs"]
                .as_array()
                .map(|fs| {
                    fs.iter()
                        .filter_map(|i| frames.get(i.as_u64()? as usize).copied())
                        .collect()
                })
                .unwrap_or_default();
            let site = site_of(&stack, &mut known);
            let live = sites.entry(site).or_default();
            live.bytes += bytes;
            live.blocks += blocks;
            total.bytes += bytes;
            total.blocks += blocks;
        }
        let mut by_site: Vec<_> = sites.into_iter().collect();
        by_site.sort_by_key(|(_, live)| std::cmp::Reverse(live.bytes));
        Some(Self { total, by_site })
    }
}

/// The function of a frame as dhat prints it (`0x1234: path::to::function (file:line:col)`),
/// without its address, location or hash suffix.
fn function(frame: &str) -> &str {
    let name = frame.split_once(": ").map_or(frame, |(_, rest)| rest);
    let name = name.split(" (").next().unwrap_or(name);
    name.rsplit_once("::h")
        .filter(|(_, hash)| hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()))
        .map_or(name, |(f, _)| f)
}

/// The source file (as the compiler named it, relative to its crate) and line of a frame, if
/// dhat resolved them: `src/cache/object.rs` and `244` of
/// `0x1234: pack (src/cache/object.rs:244:20)`.
fn location(frame: &str) -> Option<(&str, &str)> {
    let (_, place) = frame.rsplit_once(" (")?;
    let mut parts = place.strip_suffix(')')?.rsplitn(3, ':');
    let (_column, line, file) = (parts.next()?, parts.next()?, parts.next()?);
    Some((file, line))
}

/// Whether `file` is one of the host's own sources. A frame inlined into another carries no
/// crate in its name (`upsert`, not `reconhost::cache::store::Store::upsert`), so its file
/// tells; a dependency's file of the same relative path would pass too, which rules out
/// `src/lib.rs` and `src/main.rs`, and the profiler's own module is not a site.
fn host_file(file: &str, known: &mut HashMap<String, bool>) -> bool {
    if !file.starts_with("src/")
        || matches!(file, "src/lib.rs" | "src/main.rs" | "src/telemetry/heap.rs")
    {
        return false;
    }
    *known
        .entry(file.to_owned())
        .or_insert_with(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(file).is_file())
}

/// A function's own name, without its path or generic arguments: `upsert` for
/// `reconhost::cache::store::Store::upsert`, `new` for `new<alloc::sync::ArcInner<...>>`.
fn short(function: &str) -> &str {
    // `<Type as Trait>::method<...>`: what follows the impl's closing bracket.
    let name = match function.strip_prefix('<') {
        Some(_) => function.rsplit_once(">::").map_or(function, |(_, m)| m),
        None => function,
    };
    let name = name.split('<').next().unwrap_or(name);
    name.rsplit("::").next().unwrap_or(name)
}

/// Where a stack (innermost frame first) allocated, as the module doc says: the function, its
/// file under the host's `src/` and the line.
fn site_of(stack: &[&str], known: &mut HashMap<String, bool>) -> String {
    let ours = stack.iter().find_map(|frame| {
        let (file, line) = location(frame).filter(|(file, _)| host_file(file, known))?;
        Some(format!(
            "{}@{}:{line}",
            short(function(frame)),
            &file["src/".len()..]
        ))
    });
    if let Some(site) = ours {
        return site;
    }
    let outer = stack
        .iter()
        .map(|f| function(f))
        .find(|f| {
            ![
                "alloc::",
                "core::",
                "std::",
                "dhat::",
                "backtrace::",
                "[root]",
            ]
            .iter()
            .any(|p| f.contains(p))
        })
        .unwrap_or("(unknown)");
    let krate = outer
        .trim_start_matches('<')
        .split("::")
        .next()
        .unwrap_or(outer);
    format!("(no host frame: {krate})")
}
