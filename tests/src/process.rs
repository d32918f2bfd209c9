//! Child processes of the control plane.
//!
//! Two rules keep a run from leaving orphans. Every child asks the kernel for SIGKILL when its
//! parent goes away (`PR_SET_PDEATHSIG`), which covers a test runner killed by a signal or a
//! panic that aborts. And every [`Component`] kills its process when dropped, which covers the
//! ordinary paths (a test that panics and unwinds, a harness stopped on purpose).
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process. The
//! harness therefore starts components from the thread that owns the [`crate::ControlPlane`]
//! (the test's thread, or the main thread of `reconhost-cluster`), which outlives them.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// A running control-plane process whose output goes to a log file.
#[derive(Debug)]
pub struct Component {
    /// Short name used in errors and log file names (`etcd`, `kube-apiserver`, ...).
    name: &'static str,
    /// The child; `None` once it has been reaped.
    child: Option<Child>,
    /// Where stdout and stderr go, for error messages when the component dies.
    log: PathBuf,
}

impl Component {
    /// Starts `program` with `args`, writing its output to `<log_dir>/<name>.log`.
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log_dir: &Path,
    ) -> Result<Self, Error> {
        Self::spawn_with_env(name, program, args, &[], log_dir)
    }

    /// Like [`Component::spawn`], with extra environment variables.
    pub fn spawn_with_env(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self, Error> {
        Self::spawn_in(name, program, args, env, log_dir, &[])
    }

    /// Like [`Component::spawn_with_env`], started inside the cgroups whose `cgroup.procs` files
    /// are `cgroup_procs` (from its first instruction, as a container's process is: what it
    /// reads of its own cgroup at start is the limit it runs under).
    pub fn spawn_in(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
        cgroup_procs: &[PathBuf],
    ) -> Result<Self, Error> {
        let procs = cgroup_procs
            .iter()
            .map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Io {
                what: "a cgroup path".into(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(|source| Error::Io {
            what: format!("creating {}", log.display()),
            source,
        })?;
        let err = out.try_clone().map_err(|source| Error::Io {
            what: "duplicating a log handle".into(),
            source,
        })?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Its own process group: a Ctrl-C meant for the runner must not kill the control
                // plane before the harness has stopped it in order.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for procs in &procs {
                    // "0": the writing process itself.
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                    if written != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|source| Error::Io {
            what: format!("starting {name} from {}", program.display()),
            source,
        })?;
        Ok(Self {
            name,
            child: Some(child),
            log,
        })
    }

    /// The component's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The process id, while the process runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails with the tail of the component's log if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        let Some(child) = self.child.as_mut() else {
            return Err(self.exited("it was already stopped".into()));
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.child = None;
                Err(self.exited(status.to_string()))
            }
            Err(e) => Err(self.exited(e.to_string())),
        }
    }

    fn exited(&self, status: String) -> Error {
        Error::Exited {
            component: self.name,
            status,
            log: self.log.clone(),
            tail: log_tail(&self.log),
        }
    }

    /// Sends SIGKILL and reaps the process: no shutdown at all, as when a machine dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM, waits up to `grace` for the process to exit, then sends SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain system call on a pid we own and have not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// The last lines of a log file, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Whether a process with this pid exists and started at `start_time` (clock ticks since boot,
/// field 22 of `/proc/<pid>/stat`). Comparing the start time keeps a recycled pid from being
/// mistaken for the original process.
pub fn is_alive(pid: u32, start_time: u64) -> bool {
    process_start_time(pid) == Some(start_time)
}

/// The start time of a process, or `None` if it does not exist (or is a zombie).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces; fields after it are
    // plain. State is the first field after ')'; start time is the 20th after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Sends SIGKILL to a process if it is still the one recorded.
pub fn kill_if_alive(pid: u32, start_time: u64) {
    if is_alive(pid, start_time) {
        // SAFETY: plain system call; the start time check above guards against pid reuse.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}
