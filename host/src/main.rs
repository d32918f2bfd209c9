//! The `reconhost` binary: parse flags, set up logging, hand over to the library.

use reconhost::cli::Command;

/// `make bench-heap`'s build: every allocation recorded with its call stack (see
/// `reconhost::telemetry::heap`).
#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

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
