//! `mcp-sandbox-computer-vm-for-ai`: parse the command line, check it, run.

use clap::Parser;
use executor::cli::Cli;
use executor::config::Config;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if cli.mode == Some(executor::cli::ModeArg::Completions) {
        return match executor::cli::completions(cli.completion_shell) {
            Ok(script) => {
                use std::io::Write as _;
                match std::io::stdout().write_all(&script) {
                    Ok(()) => std::process::ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: cannot write the script: {e}");
                        std::process::ExitCode::from(1)
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::from(2)
            }
        };
    }
    if cli.completion_shell.is_some() {
        eprintln!("error: a shell name is only taken by `completions SHELL`");
        return std::process::ExitCode::from(2);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    if std::env::var_os("AUTO_INSTALL_FLYCTL").is_some() {
        tracing::info!(
            "AUTO_INSTALL_FLYCTL is no longer needed: the Fly backend talks to the Machines API directly"
        );
    }
    let config = match Config::from_cli(
        &cli,
        std::env::var("ENABLE_LIFECYCLE_TOOLS").ok().as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = runtime.block_on(executor::run::run(config));
    // A blocking read of stdin may still be parked in tokio's blocking pool: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
