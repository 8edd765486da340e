//! Running the client's futures from Python's thread: on one tokio
//! runtime for the process, without the GIL (so other Python threads run
//! while a call waits), and cancelled by Ctrl-C.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::{self, Failure};

/// How often a waiting call looks for a signal (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

fn runtime() -> Result<&'static tokio::runtime::Runtime, Failure> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("dpgate")
        .build()
        .map_err(|error| Failure::Failed(format!("starting the client's runtime: {error}")))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// Runs `work` to its end, with the GIL released. A signal handler that
/// raises (Python's for SIGINT raises KeyboardInterrupt) cancels it:
/// dropping a release's future is safe, since the server makes a release
/// whole or not at all and its idempotency key answers a retry.
pub fn block_on<T: Send>(
    py: Python<'_>,
    work: impl Future<Output = Result<T, Failure>> + Send,
) -> PyResult<T> {
    let runtime = runtime().map_err(|failure| errors::to_py(py, failure))?;
    let outcome = py.detach(|| {
        runtime.block_on(async {
            tokio::pin!(work);
            loop {
                tokio::select! {
                    done = &mut work => return Ok(done),
                    () = tokio::time::sleep(SIGNAL_POLL) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    });
    match outcome {
        Ok(done) => done.map_err(|failure| errors::to_py(py, failure)),
        Err(interrupted) => Err(interrupted),
    }
}
