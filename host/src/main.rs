//! The `reconhost` binary: parse flags, set up logging, hand over to the library.

use reconhost::cli::Command;

/// `make bench-heap`'s build: every allocation recorded with its call stack (see
/// `reconhost::telemetry::heap`).
#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// jemalloc: glibc's malloc was a fifth of the host's CPU, and jemalloc's per-thread caches
/// take 5–11 % off every reconcile at the same anonymous memory (docs/BENCHMARKS.md, *The
/// allocator*).
#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (`_RJEM_MALLOC_CONF` in the environment overrides
/// them one by one). A background thread gives freed pages back, so an idle host shrinks too,
/// a second after they were freed rather than ten, and with `MADV_DONTNEED` at once (no muzzy
/// stage): pages given back lazily (`MADV_FREE`) still count in RSS and in the container's
/// memory until the kernel wants them. Two arenas whatever the node's cores: jemalloc's
/// default is four per core, each holding pages of its own, and the per-thread caches take
/// most allocations without an arena's lock anyway.
#[cfg(not(feature = "heap-profile"))]
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: a C string literal lives for the whole program.
    unsafe { &*c"background_thread:true,narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() },
);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = reconhost::inspect::parse_cli();
    let tracing = match &cli.command {
        Command::Run(args) => args.tracing.clone(),
        _ => Default::default(),
    };
    let telemetry = reconhost::telemetry::init(cli.log_format, &tracing)?;
    reconhost::install_crypto_provider();
    match cli.command {
        Command::Run(args) => {
            #[cfg(feature = "heap-profile")]
            reconhost::telemetry::heap::start();
            let ran = reconhost::run::run(*args, reconhost::run::shutdown_signal()).await;
            telemetry.shutdown();
            ran
        }
        Command::Render(args) => {
            // Compiling and calling the plugin blocks; keep it off the async workers.
            let text =
                tokio::task::spawn_blocking(move || reconhost::render::render(&args)).await??;
            print!("{text}");
            Ok(())
        }
        Command::Plugin(command) => {
            print!("{}", reconhost::publish::run(command).await?);
            Ok(())
        }
        Command::Trace(args) => {
            print!("{}", reconhost::inspect::trace(&args).await?);
            Ok(())
        }
        Command::Status(args) => {
            print!("{}", reconhost::inspect::status(&args).await?);
            Ok(())
        }
        Command::Init(args) => {
            print!("{}", reconhost::init::init(&args)?);
            Ok(())
        }
        Command::CompileWorker => std::process::exit(reconhost::runtime::worker_main()),
        Command::Crds => {
            print!("{}", reconhost::api::crd_yaml());
            Ok(())
        }
    }
}
