//! The `dpgate` binary: parse the command line, set up logging, run.

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use dpgate::config::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A person reads a terminal; a log collector reads JSON, one object a
    // line, with the request id and the span's dataset and release ids.
    if std::io::stderr().is_terminal() {
        logs.init();
    } else {
        logs.json()
            .with_current_span(true)
            .with_span_list(true)
            .init();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dpgate: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dpgate::commands::run(cli.database, cli.command)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("dpgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}
