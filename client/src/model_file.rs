//! The model file: a logistic-regression model that says what privacy it
//! cost. `weights` apply to features in the units they were uploaded in
//! (schema order, or the analyst's own file's order): σ(weightsᵀx +
//! intercept) is the predicted probability for a raw row x.

use std::path::Path;

use dpgate_learn::sigmoid;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A model as saved by `dpgate-client train` or `release model --out`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub weights: Vec<f64>,
    pub intercept: f64,
    pub feature_names: Vec<String>,
    /// The label column the model predicts, as the dataset names it.
    pub label: String,
    pub dataset_id: Uuid,
    /// The release the model was made from, and its kind and price.
    pub release_id: Uuid,
    pub kind: String,
    pub epsilon: f64,
    pub delta: f64,
    /// How a label-blind trainer got there (absent for server-side models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<Training>,
}

/// The trainer's settings and outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Training {
    pub rows: usize,
    pub epochs: usize,
    pub converged: bool,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub decay: f64,
    pub l2: f64,
    pub seed: u64,
    /// The label-blind loss estimate of the last epoch.
    pub final_loss: f64,
    /// The features came from the analyst's own file (supplied to the
    /// release), not from the server.
    pub supplied_features: bool,
}

impl ModelFile {
    /// σ(weightsᵀx + intercept) for a raw row in `feature_names` order.
    pub fn predict(&self, row: &[f64]) -> f64 {
        let logit: f64 = self.weights.iter().zip(row).map(|(w, x)| w * x).sum();
        sigmoid(logit + self.intercept)
    }

    /// Reads a model file.
    ///
    /// # Errors
    /// I/O, or not a model file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
        let model: ModelFile = serde_json::from_str(&text)
            .map_err(|error| anyhow::anyhow!("{} is not a model file: {error}", path.display()))?;
        anyhow::ensure!(
            model.weights.len() == model.feature_names.len(),
            "{}: {} weights for {} feature names",
            path.display(),
            model.weights.len(),
            model.feature_names.len()
        );
        Ok(model)
    }

    /// Writes it as pretty JSON.
    ///
    /// # Errors
    /// I/O.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }
}
