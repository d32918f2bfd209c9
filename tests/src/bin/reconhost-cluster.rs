//! `reconhost-cluster`: the local control plane for people and for `make`.
//!
//! - `up`: start a named instance in the background (or find it running) and print
//!   `KUBECONFIG=<path>` as the last line. Repeatable.
//! - `down`: stop it. Repeatable; stopping nothing is not an error.
//! - `status`: say whether it runs.
//! - `exec -- <command>`: start a private instance, run the command with `KUBECONFIG` and
//!   `RECONHOST_KUBECONFIG` set, stop the instance, exit with the command's status. `make test`
//!   uses this, so a test run always cleans up after itself.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use reconhost_tests::registry::{self, Recorded};
use reconhost_tests::{ControlPlane, Options};

#[derive(Parser)]
#[command(
    about = "A local Kubernetes control plane for reconhost (etcd, kube-apiserver, kube-controller-manager)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the instance in the background, or find it running; print `KUBECONFIG=<path>` last.
    Up {
        /// Instance name.
        #[arg(long, default_value = "dev")]
        name: String,
    },
    /// Stop the instance.
    Down {
        /// Instance name.
        #[arg(long, default_value = "dev")]
        name: String,
    },
    /// Print whether the instance runs, and its kubeconfig.
    Status {
        /// Instance name.
        #[arg(long, default_value = "dev")]
        name: String,
    },
    /// Run a command against a private instance that is stopped afterwards.
    Exec {
        /// Instance name.
        #[arg(long, default_value = "exec")]
        name: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run an instance in the foreground until SIGTERM or SIGINT (what `up` starts).
    #[command(hide = true)]
    Serve {
        /// Instance name.
        #[arg(long)]
        name: String,
    },
}

/// How long `up` waits for a background instance to become ready.
const UP_TIMEOUT: Duration = Duration::from_secs(300);

fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Current-thread runtime: the components are spawned from the main thread, which lives as
    // long as they should (see reconhost_tests::process on PR_SET_PDEATHSIG).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Up { name } => up(&name).map(|()| ExitCode::SUCCESS),
        Cmd::Down { name } => down(&name).map(|()| ExitCode::SUCCESS),
        Cmd::Status { name } => Ok(status(&name)),
        Cmd::Exec { name, command } => rt.block_on(exec(&name, &command)),
        Cmd::Serve { name } => rt.block_on(serve(&name)).map(|()| ExitCode::SUCCESS),
    }
}

fn instance_dir(name: &str) -> PathBuf {
    registry::root().join(name)
}

fn up(name: &str) -> anyhow::Result<()> {
    let dir = instance_dir(name);
    if registry::live_owner(&dir).is_some() && dir.join("ready").exists() {
        eprintln!("control plane {name:?} is already running");
        println!("KUBECONFIG={}", dir.join("kubeconfig").display());
        return Ok(());
    }
    std::fs::create_dir_all(registry::root())?;
    let log_path = registry::root().join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["serve", "--name", name])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; the server must outlive this process and its terminal.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .context("starting the control-plane server")?;
    let start = Instant::now();
    eprintln!(
        "starting control plane {name:?} (log: {})",
        log_path.display()
    );
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the control plane exited ({status}):\n{}",
                reconhost_tests::process::log_tail(&log_path)
            );
        }
        if dir.join("ready").exists() {
            break;
        }
        if start.elapsed() > UP_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the control plane was not ready after {} s; see {}",
                UP_TIMEOUT.as_secs(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "control plane {name:?} is ready after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    println!("KUBECONFIG={}", dir.join("kubeconfig").display());
    Ok(())
}

fn down(name: &str) -> anyhow::Result<()> {
    let dir = instance_dir(name);
    let Some(owner) = registry::live_owner(&dir) else {
        if registry::reap_if_stale(&dir)? && dir.exists() {
            eprintln!("removed the remains of control plane {name:?}");
        }
        eprintln!("control plane {name:?} is not running");
        return Ok(());
    };
    // SAFETY: plain system call; live_owner checked the pid's start time.
    unsafe { libc::kill(owner.pid as libc::pid_t, libc::SIGTERM) };
    let start = Instant::now();
    while owner.is_alive() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if owner.is_alive() {
        // Its components die with it (PR_SET_PDEATHSIG); reaping removes what is left.
        unsafe { libc::kill(owner.pid as libc::pid_t, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(200));
    }
    registry::reap_if_stale(&dir)?;
    wait_gone(&registry::recorded_processes(&dir));
    eprintln!("control plane {name:?} stopped");
    Ok(())
}

fn wait_gone(processes: &[Recorded]) {
    let start = Instant::now();
    while processes.iter().any(|p| p.is_alive()) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status(name: &str) -> ExitCode {
    let dir = instance_dir(name);
    match registry::live_owner(&dir) {
        Some(owner) if dir.join("ready").exists() => {
            println!(
                "running (pid {})\nKUBECONFIG={}",
                owner.pid,
                dir.join("kubeconfig").display()
            );
            ExitCode::SUCCESS
        }
        Some(owner) => {
            println!("starting (pid {})", owner.pid);
            ExitCode::from(3)
        }
        None => {
            println!("not running");
            ExitCode::from(3)
        }
    }
}

async fn serve(name: &str) -> anyhow::Result<()> {
    // The developer's instance: what `make run` needs (a registry, progressing Deployments).
    let plane = ControlPlane::start(Options {
        name: Some(name.to_owned()),
        crds: reconhost_tests::crds::bundled(),
        registry: true,
        workloads: true,
        ..Options::default()
    })
    .await?;
    std::fs::write(plane.dir().join("ready"), b"")?;
    tracing::info!(kubeconfig = %plane.kubeconfig().display(), "control plane ready");
    wait_for_signal().await;
    tracing::info!("stopping the control plane");
    plane.stop();
    Ok(())
}

async fn exec(name: &str, command: &[String]) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let plane = ControlPlane::start(Options {
        name: Some(name.to_owned()),
        crds: reconhost_tests::crds::bundled(),
        registry: true,
        ..Options::default()
    })
    .await?;
    eprintln!(
        "control plane ready after {:.1} s: KUBECONFIG={}",
        start.elapsed().as_secs_f64(),
        plane.kubeconfig().display()
    );
    let status = run_child(command, &plane.kubeconfig(), plane.registry()).await;
    plane.stop();
    let status = status?;
    Ok(status
        .code()
        .map_or(ExitCode::FAILURE, |c| ExitCode::from(c as u8)))
}

async fn run_child(
    command: &[String],
    kubeconfig: &Path,
    registry: Option<String>,
) -> anyhow::Result<std::process::ExitStatus> {
    let mut child = tokio::process::Command::new(&command[0]);
    child
        .args(&command[1..])
        .env("KUBECONFIG", kubeconfig)
        .env("RECONHOST_KUBECONFIG", kubeconfig);
    if let Some(registry) = registry {
        child.env("RECONHOST_REGISTRY", registry);
    }
    let mut child = child
        .spawn()
        .with_context(|| format!("starting {}", command[0]))?;
    // A Ctrl-C reaches the child too (same process group); this process waits for the child to
    // finish and then stops the control plane instead of dying with it.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terms = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            status = child.wait() => return Ok(status?),
            _ = interrupts.recv() => {}
            _ = terms.recv() => { let _ = child.start_kill(); }
        }
    }
}

async fn wait_for_signal() {
    let mut terms = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = terms.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
