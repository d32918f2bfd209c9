//! Run directories of control-plane instances, and clean-up of stale ones.
//!
//! Every instance lives in `<root>/<name>/` and records who owns it (`owner`: pid and start time
//! of the harness process) and what it started (`components`: name, pid and start time of each
//! child). When an owner dies without cleaning up (SIGKILL, power loss of the terminal), the next
//! harness to start finds the directory, sees the owner is gone, kills any recorded child that is
//! somehow still alive and removes the directory. The root defaults to `/dev/shm/reconhost`
//! because etcd on tmpfs is several times faster than on disk.

use std::fs;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::process::{is_alive, kill_if_alive, process_start_time};

/// Where run directories live: `$RECONHOST_RUN_ROOT`, else `/dev/shm/reconhost`, else the
/// system temporary directory.
pub fn root() -> PathBuf {
    if let Some(dir) = std::env::var_os("RECONHOST_RUN_ROOT") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join("reconhost")
    } else {
        std::env::temp_dir().join("reconhost")
    }
}

/// A process recorded in a run directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot, to tell a recycled pid apart.
    pub start_time: u64,
}

impl Recorded {
    /// The calling process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            start_time: process_start_time(pid).unwrap_or_default(),
        }
    }

    /// A running child.
    pub fn of(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            start_time: process_start_time(pid)?,
        })
    }

    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split_whitespace();
        Some(Self {
            pid: parts.next()?.parse().ok()?,
            start_time: parts.next()?.parse().ok()?,
        })
    }

    /// Whether the recorded process is still running.
    pub fn is_alive(self) -> bool {
        is_alive(self.pid, self.start_time)
    }
}

/// The owner of a run directory, if it records a live one.
pub fn live_owner(dir: &Path) -> Option<Recorded> {
    let owner = Recorded::parse(&fs::read_to_string(dir.join("owner")).ok()?)?;
    owner.is_alive().then_some(owner)
}

/// Removes a run directory whose owner is gone, killing any child it recorded that still runs.
/// Returns whether the directory was stale (and is now gone).
pub fn reap_if_stale(dir: &Path) -> Result<bool, Error> {
    if live_owner(dir).is_some() {
        return Ok(false);
    }
    if let Ok(text) = fs::read_to_string(dir.join("components")) {
        for line in text.lines() {
            if let Some(child) = line
                .split_once(' ')
                .and_then(|(_, rest)| Recorded::parse(rest))
            {
                kill_if_alive(child.pid, child.start_time);
            }
        }
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(Error::Io {
            what: format!("removing stale run directory {}", dir.display()),
            source,
        }),
    }
}

/// Reaps every stale run directory under the root. Returns the directories removed.
pub fn reap_all_stale() -> Result<Vec<PathBuf>, Error> {
    let Ok(entries) = fs::read_dir(root()) else {
        return Ok(Vec::new());
    };
    let mut reaped = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        // A hidden directory without an owner file is being set up by `claim` right now.
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden && !dir.join("owner").exists() {
            continue;
        }
        if dir.is_dir() && reap_if_stale(&dir)? {
            reaped.push(dir);
        }
    }
    Ok(reaped)
}

/// Creates the run directory `<root>/<name>` owned by the calling process. A stale directory of
/// the same name is reaped first; one with a live owner is an error.
///
/// The directory is prepared under a hidden temporary name and renamed into place with its
/// `owner` file already written, so a concurrent [`reap_all_stale`] never sees an ownerless
/// directory and mistakes it for a stale one.
pub fn claim(name: &str) -> Result<PathBuf, Error> {
    let dir = root().join(name);
    if let Some(owner) = live_owner(&dir) {
        return Err(Error::InUse {
            name: name.to_owned(),
            dir,
            pid: owner.pid,
        });
    }
    reap_if_stale(&dir)?;
    let io = |what: String| move |source| Error::Io { what, source };
    let me = Recorded::current();
    let staging = root().join(format!(".{name}.{}", me.pid));
    fs::create_dir_all(&staging).map_err(io(format!("creating {}", staging.display())))?;
    fs::write(
        staging.join("owner"),
        format!("{} {}\n", me.pid, me.start_time),
    )
    .map_err(io(format!("writing the owner of {}", staging.display())))?;
    fs::rename(&staging, &dir).map_err(|source| {
        let _ = fs::remove_dir_all(&staging);
        if source.kind() == std::io::ErrorKind::DirectoryNotEmpty
            || source.kind() == std::io::ErrorKind::AlreadyExists
        {
            let pid = live_owner(&dir).map_or(0, |o| o.pid);
            Error::InUse {
                name: name.to_owned(),
                dir: dir.clone(),
                pid,
            }
        } else {
            Error::Io {
                what: format!("moving {} into place", dir.display()),
                source,
            }
        }
    })?;
    Ok(dir)
}

/// Appends a started child to the run directory's record.
pub fn record_component(dir: &Path, name: &str, pid: u32) -> Result<(), Error> {
    use std::io::Write as _;
    let Some(child) = Recorded::of(pid) else {
        return Ok(());
    };
    let path = dir.join("components");
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|source| Error::Io {
            what: format!("opening {}", path.display()),
            source,
        })?;
    writeln!(file, "{name} {} {}", child.pid, child.start_time).map_err(|source| Error::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

/// The processes recorded in a run directory (owner first, then components).
pub fn recorded_processes(dir: &Path) -> Vec<Recorded> {
    let mut all: Vec<Recorded> = fs::read_to_string(dir.join("owner"))
        .ok()
        .and_then(|t| Recorded::parse(&t))
        .into_iter()
        .collect();
    if let Ok(text) = fs::read_to_string(dir.join("components")) {
        all.extend(
            text.lines()
                .filter_map(|l| l.split_once(' ').and_then(|(_, r)| Recorded::parse(r))),
        );
    }
    all
}
