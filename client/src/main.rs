//! `dpgate-client`: see `dpgate-client --help`.

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::process::ExitCode;

use clap::Parser;
use dpgate_client::ClientError;
use dpgate_client::cli::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: no async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    match runtime.block_on(run(cli, &mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A server's problem document as it came, for scripts.
            match error.downcast_ref::<ClientError>() {
                Some(ClientError::Problem(problem)) if json => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(problem).unwrap_or_default()
                    );
                }
                _ => {}
            }
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
