//! `dpgate._native`: the Rust half of the `dpgate` Python package. It is
//! the dpgate-client crate, reached from Python: the same client (retries,
//! idempotency keys), the same label-blind training flow, feature maps and
//! model files as the `dpgate-client` CLI, so a Python analyst and the CLI
//! get identical results and nothing is implemented twice.
//!
//! Requests and answers cross as the API's JSON text: the crate's types
//! check every field on the way in, and the Python side shapes the answers
//! into objects and data frames. `python/dpgate/_native.pyi` is the
//! interface.

mod client;
mod errors;
mod models;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<client::NativeClient>()?;
    module.add_function(wrap_pyfunction!(models::logits, module)?)?;
    module.add_function(wrap_pyfunction!(models::load_model, module)?)?;
    module.add_function(wrap_pyfunction!(models::save_model, module)?)?;
    module.add_function(wrap_pyfunction!(models::model_of_release, module)?)?;
    module.add_function(wrap_pyfunction!(models::evaluate, module)?)?;
    module.add_function(wrap_pyfunction!(models::predict, module)?)?;
    Ok(())
}
