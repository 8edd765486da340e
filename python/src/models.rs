//! Model files from Python: predictions through a model's feature map,
//! reading and writing the file, the model of a server-side release, the
//! CLI's `evaluate` and `predict`, and the training flow's progress.

use std::path::Path;

use dpgate_client::model_file::ModelFile;
use dpgate_client::trainer::EpochReport;
use dpgate_client::types::{Dataset, Release};
use dpgate_client::walr_training::TrainProgress;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::client::{json, parse};
use crate::errors::{self, Failure};

fn model(py: Python<'_>, text: &str) -> PyResult<ModelFile> {
    ModelFile::from_json(text)
        .map_err(|error| errors::to_py(py, Failure::Invalid(format!("{error:#}"))))
}

fn failed(py: Python<'_>) -> impl FnOnce(anyhow::Error) -> PyErr + '_ {
    move |error| errors::to_py(py, error.into())
}

#[pyfunction]
pub fn logits<'py>(
    py: Python<'py>,
    model: &str,
    x: PyReadonlyArray2<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let model = self::model(py, model)?;
    let x = x.as_array();
    let logits = model.logits(x).map_err(failed(py))?;
    Ok(logits.into_pyarray(py))
}

#[pyfunction]
pub fn load_model(py: Python<'_>, path: &str) -> PyResult<String> {
    let model = ModelFile::load(Path::new(path)).map_err(failed(py))?;
    model.to_json().map_err(failed(py))
}

#[pyfunction]
pub fn save_model(py: Python<'_>, model: &str, path: &str) -> PyResult<()> {
    self::model(py, model)?
        .save(Path::new(path))
        .map_err(failed(py))
}

#[pyfunction]
pub fn model_of_release(py: Python<'_>, dataset: &str, release: &str) -> PyResult<Option<String>> {
    let parsed = parse::<Dataset>("the dataset", dataset)
        .and_then(|dataset| Ok((dataset, parse::<Release>("the release", release)?)));
    let (dataset, release) = parsed.map_err(|failure| errors::to_py(py, failure))?;
    match ModelFile::of_release(&dataset, &release).map_err(failed(py))? {
        Some(model) => model.to_json().map(Some).map_err(failed(py)),
        None => Ok(None),
    }
}

#[pyfunction]
#[pyo3(signature = (model, data, label=None))]
pub fn evaluate(
    py: Python<'_>,
    model: &str,
    data: &str,
    label: Option<String>,
) -> PyResult<String> {
    let model = self::model(py, model)?;
    let label = label.unwrap_or_else(|| model.label.clone());
    let evaluation = std::fs::File::open(data)
        .map_err(|error| anyhow::anyhow!("{data}: {error}"))
        .and_then(|file| {
            dpgate_client::evaluate::evaluate(&model, std::io::BufReader::new(file), &label)
        })
        .map_err(failed(py))?;
    json(&evaluation).map_err(|failure| errors::to_py(py, failure))
}

#[pyfunction]
pub fn predict(py: Python<'_>, model: &str, data: &str, out: &str) -> PyResult<usize> {
    let model = self::model(py, model)?;
    let scored = (|| {
        let input =
            std::fs::File::open(data).map_err(|error| anyhow::anyhow!("{data}: {error}"))?;
        let output =
            std::fs::File::create(out).map_err(|error| anyhow::anyhow!("{out}: {error}"))?;
        dpgate_client::predict::predict(
            &model,
            std::io::BufReader::new(input),
            std::io::BufWriter::new(output),
        )
    })();
    scored.map_err(failed(py))
}

/// A training run's progress as calls of a Python callable
/// `progress(stage, done, total, message)`; one that raises is ignored, so
/// that drawing never fails a training run.
pub struct Progress {
    callback: Option<Py<PyAny>>,
}

impl Progress {
    pub fn new(callback: Option<Py<PyAny>>) -> Self {
        Progress { callback }
    }

    fn tell(&self, stage: &str, done: u64, total: Option<u64>, message: Option<String>) {
        if let Some(callback) = &self.callback {
            Python::attach(|py| drop(callback.call1(py, (stage, done, total, message))));
        }
    }
}

impl TrainProgress for Progress {
    fn features(&self, received: u64) {
        self.tell("features", received, None, None);
    }

    fn releasing(&self, waiting: bool) {
        self.tell("release", u64::from(!waiting), Some(1), None);
    }

    fn training(&self, epochs: usize) {
        self.tell("train", 0, Some(epochs as u64), None);
    }

    fn epoch(&self, report: &EpochReport) {
        let message = format!("loss {:.5} Δθ {:.2e}", report.loss, report.change);
        self.tell("train", report.epoch as u64, None, Some(message));
    }

    fn done(&self) {
        self.tell("done", 0, None, None);
    }
}
