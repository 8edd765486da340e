//! `NativeClient`: every call of `dpgate_client::Client`, JSON in and out.

use std::sync::Arc;
use std::time::Duration;

use dpgate_client::features::FeatureTable;
use dpgate_client::types::{BudgetChange, CreateDataset, GradientCall, ReleaseRequest, Source};
use dpgate_client::walr_training::{self, TrainPlan};
use dpgate_client::{Client, ReleaseOptions, Timeouts, UploadFormat};
use numpy::PyReadonlyArray2;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::errors::{self, Failure, invalid};
use crate::models::Progress;
use crate::runtime::block_on;

/// A connection to one dpgate server.
#[pyclass(frozen, module = "dpgate._native")]
pub struct NativeClient {
    client: Client,
}

/// `value` as JSON text.
pub fn json(value: &impl Serialize) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|error| Failure::Failed(error.to_string()))
}

/// `text`, the JSON of a `what`.
pub fn parse<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, Failure> {
    serde_json::from_str(text).map_err(|error| invalid(what, error))
}

fn id(text: &str) -> Result<Uuid, Failure> {
    Uuid::parse_str(text).map_err(|error| invalid(&format!("id {text:?}"), error))
}

/// `Ok` as is, a failure raised.
fn ready<T>(py: Python<'_>, value: Result<T, Failure>) -> PyResult<T> {
    value.map_err(|failure| errors::to_py(py, failure))
}

/// Calls `progress` with each count; a callback that raises is ignored,
/// so that drawing never fails a call.
fn counting(progress: Option<&Py<PyAny>>) -> impl FnMut(u64) + '_ {
    move |count| {
        if let Some(progress) = progress {
            Python::attach(|py| drop(progress.call1(py, (count,))));
        }
    }
}

#[pymethods]
impl NativeClient {
    #[new]
    #[pyo3(signature = (url, token=None, connect_timeout=10.0, timeout=330.0))]
    fn new(url: &str, token: Option<String>, connect_timeout: f64, timeout: f64) -> PyResult<Self> {
        let seconds = |value: f64, name: &str| {
            Duration::try_from_secs_f64(value).map_err(|error| {
                pyo3::exceptions::PyValueError::new_err(format!("{name} = {value}: {error}"))
            })
        };
        let timeouts = Timeouts {
            connect: seconds(connect_timeout, "connect_timeout")?,
            request: seconds(timeout, "timeout")?,
        };
        Ok(NativeClient {
            client: Client::with_timeouts(url, token, timeouts),
        })
    }

    #[getter]
    fn url(&self) -> &str {
        self.client.base()
    }

    fn with_token(&self, token: &str) -> Self {
        NativeClient {
            client: self.client.with_token(token),
        }
    }

    fn health(&self, py: Python<'_>) -> PyResult<()> {
        block_on(py, async { Ok(self.client.health().await?) })
    }

    fn datasets(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, async { json(&self.client.datasets().await?) })
    }

    fn dataset(&self, py: Python<'_>, id: &str) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async { json(&self.client.dataset(id).await?) })
    }

    #[pyo3(signature = (request, background=false))]
    fn create_dataset(&self, py: Python<'_>, request: &str, background: bool) -> PyResult<String> {
        let request: CreateDataset = ready(py, parse("the dataset", request))?;
        block_on(py, async {
            if background {
                json(&self.client.create_dataset_in_background(&request).await?)
            } else {
                json(&self.client.create_dataset(&request).await?)
            }
        })
    }

    fn upload_rows(
        &self,
        py: Python<'_>,
        id: &str,
        format: &str,
        body: Vec<u8>,
    ) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        let format = ready(
            py,
            match format {
                "csv" => Ok(UploadFormat::Csv),
                "ndjson" => Ok(UploadFormat::Ndjson),
                "arrow" => Ok(UploadFormat::ArrowStream),
                "parquet" => Ok(UploadFormat::Parquet),
                other => Err(Failure::Invalid(format!(
                    "format {other:?}: csv, ndjson, arrow or parquet"
                ))),
            },
        )?;
        block_on(py, async {
            json(&self.client.upload_rows(id, format, body).await?)
        })
    }

    #[pyo3(signature = (id, source, background=false))]
    fn register_rows(
        &self,
        py: Python<'_>,
        id: &str,
        source: &str,
        background: bool,
    ) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        let source: Source = ready(py, parse("the source", source))?;
        block_on(py, async {
            if background {
                json(&self.client.register_rows_in_background(id, &source).await?)
            } else {
                json(&self.client.register_rows(id, &source).await?)
            }
        })
    }

    fn registration(&self, py: Python<'_>, id: &str) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async { json(&self.client.registration(id).await?) })
    }

    #[pyo3(signature = (id, poll=1.0))]
    fn registered(&self, py: Python<'_>, id: &str, poll: f64) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        let poll = ready(
            py,
            Duration::try_from_secs_f64(poll).map_err(|error| invalid("poll", error)),
        )?;
        block_on(py, async { json(&self.client.registered(id, poll).await?) })
    }

    #[pyo3(signature = (id, request, dry_run=false, idempotency_key=None))]
    fn release(
        &self,
        py: Python<'_>,
        id: &str,
        request: &str,
        dry_run: bool,
        idempotency_key: Option<String>,
    ) -> PyResult<(String, bool)> {
        let id = ready(py, self::id(id))?;
        let request: ReleaseRequest = ready(py, parse("the release request", request))?;
        let options = ReleaseOptions {
            idempotency_key,
            dry_run,
        };
        block_on(py, async {
            let released = self.client.release(id, &request, &options).await?;
            Ok((json(&released.release)?, released.replayed))
        })
    }

    fn get_release(&self, py: Python<'_>, id: &str, release: &str) -> PyResult<String> {
        let (id, release) = ready(py, self::id(id).and_then(|id| Ok((id, self::id(release)?))))?;
        block_on(py, async {
            json(&self.client.get_release(id, release).await?)
        })
    }

    #[pyo3(signature = (id, analyst=None, after=None, limit=None))]
    fn releases_page(
        &self,
        py: Python<'_>,
        id: &str,
        analyst: Option<&str>,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async {
            json(&self.client.releases_page(id, analyst, after, limit).await?)
        })
    }

    fn gradient_call(
        &self,
        py: Python<'_>,
        id: &str,
        release: &str,
        call: &str,
    ) -> PyResult<String> {
        let (id, release) = ready(py, self::id(id).and_then(|id| Ok((id, self::id(release)?))))?;
        let call: GradientCall = ready(py, parse("the gradient call", call))?;
        block_on(py, async {
            json(&self.client.gradient_call(id, release, &call).await?)
        })
    }

    fn change_budget(&self, py: Python<'_>, id: &str, change: &str) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        let change: BudgetChange = ready(py, parse("the budget change", change))?;
        block_on(py, async {
            json(&self.client.change_budget(id, &change).await?)
        })
    }

    #[pyo3(signature = (id, format="arrow", progress=None))]
    fn features<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        format: &str,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let id = ready(py, self::id(id))?;
        let arrow = ready(
            py,
            match format {
                "arrow" => Ok(true),
                "csv" => Ok(false),
                other => Err(Failure::Invalid(format!("format {other:?}: arrow or csv"))),
            },
        )?;
        let bytes = block_on(py, async {
            let received = counting(progress.as_ref());
            Ok(if arrow {
                self.client.features_arrow(id, received).await?
            } else {
                self.client.features_csv(id, received).await?
            })
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn metrics(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, async { Ok(self.client.metrics().await?) })
    }

    fn ledger(&self, py: Python<'_>, id: &str) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async { json(&self.client.ledger(id).await?) })
    }

    #[pyo3(signature = (id, after=None, limit=None))]
    fn ledger_page(
        &self,
        py: Python<'_>,
        id: &str,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async {
            json(&self.client.ledger_page(id, after, limit).await?)
        })
    }

    fn verify_ledger(&self, py: Python<'_>, id: &str) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async { json(&self.client.verify_ledger(id).await?) })
    }

    #[pyo3(signature = (id, deltas=Vec::new()))]
    fn privacy_profile(&self, py: Python<'_>, id: &str, deltas: Vec<f64>) -> PyResult<String> {
        let id = ready(py, self::id(id))?;
        block_on(py, async {
            json(&self.client.privacy_profile(id, &deltas).await?)
        })
    }

    /// The CLI's `train` flow; see `_native.pyi`.
    #[pyo3(signature = (plan, features=None, progress=None))]
    fn train(
        &self,
        py: Python<'_>,
        plan: &str,
        features: Option<(Vec<String>, Vec<String>, PyReadonlyArray2<'_, f64>)>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<(String, String)> {
        let plan: TrainPlan = ready(py, parse("the training plan", plan))?;
        let supplied = features.map(|(row_ids, names, x)| FeatureTable {
            row_ids,
            names,
            x: x.as_array().to_owned(),
        });
        if let Some(table) = &supplied {
            ready(py, check_table(table))?;
        }
        let progress = Arc::new(Progress::new(progress));
        block_on(py, async {
            let trained = walr_training::train(&self.client, &plan, supplied, progress).await?;
            Ok((trained.model.to_json()?, json(&trained.release)?))
        })
    }
}

/// A supplied table's parts fit together: one id and one row per row, one
/// name per column.
fn check_table(table: &FeatureTable) -> Result<(), Failure> {
    let (rows, columns) = table.x.dim();
    if table.row_ids.len() != rows || table.names.len() != columns {
        return Err(Failure::Invalid(format!(
            "the features: {} row ids and {} names for {rows} rows × {columns} columns",
            table.row_ids.len(),
            table.names.len()
        )));
    }
    Ok(())
}
