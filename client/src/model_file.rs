//! The model file: a logistic-regression model that says what privacy it
//! cost. Without a map, `weights` apply to features in the units they were
//! uploaded in (schema order, or the analyst's own file's order):
//! σ(weightsᵀx + intercept) is the predicted probability for a raw row x.
//! A model trained on a release's feature map keeps the map, since its
//! weights cannot be folded back into raw units through the map's shrink.

use std::borrow::Cow;
use std::path::Path;

use anyhow::Context;
use dpgate_api_types::{Dataset, FeatureMap, Release, ReleaseOutput};
use dpgate_learn::sigmoid;
use ndarray::ArrayView2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::features::Scaling;

/// A model as saved by `dpgate-client train` or `release model --out`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// Over the raw features, or, with a `map`, over v(scale(x)).
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
    /// The release's feature map the weights apply to (absent: the raw
    /// features).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<ModelMap>,
}

/// How a raw row becomes what a mapped model's weights apply to: scaled
/// into [0, 1] as the trainer scaled it, then v of the release's map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMap {
    pub scaling: Scaling,
    pub feature_map: FeatureMap,
}

impl ModelMap {
    /// v(scale(raw)).
    pub fn apply(&self, raw: &[f64]) -> Vec<f64> {
        let mut scaled = raw.to_vec();
        self.scaling.scale_row(&mut scaled);
        let mut mapped = vec![0.0; scaled.len()];
        self.feature_map.apply(&scaled, &mut mapped);
        mapped
    }

    /// Checks that it maps rows of `k` features.
    ///
    /// # Errors
    /// Bounds or a feature map of other lengths, or a map that can not be
    /// applied.
    pub fn check(&self, k: usize) -> anyhow::Result<()> {
        let Scaling { min, max } = &self.scaling;
        anyhow::ensure!(
            min.len() == k && max.len() == k,
            "the map scales {} lower and {} upper bounds for {k} features",
            min.len(),
            max.len()
        );
        self.feature_map
            .check(k)
            .map_err(|error| anyhow::anyhow!("the feature map: {error}"))
    }
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
    /// weightsᵀx + intercept for a raw row x in `feature_names` order, or
    /// weightsᵀv(scale(x)) + intercept with a map: the log-odds.
    pub fn logit(&self, row: &[f64]) -> f64 {
        let features = match &self.map {
            Some(map) => Cow::Owned(map.apply(row)),
            None => Cow::Borrowed(row),
        };
        let dot: f64 = self
            .weights
            .iter()
            .zip(&*features)
            .map(|(w, x)| w * x)
            .sum();
        dot + self.intercept
    }

    /// σ of [`ModelFile::logit`]: the predicted probability of label 1.
    pub fn predict(&self, row: &[f64]) -> f64 {
        sigmoid(self.logit(row))
    }

    /// [`ModelFile::logit`] of every row of `x` (rows × features, in
    /// `feature_names` order), on all cores.
    ///
    /// # Errors
    /// Rows of another width than the model's.
    pub fn logits(&self, x: ArrayView2<'_, f64>) -> anyhow::Result<Vec<f64>> {
        anyhow::ensure!(
            x.ncols() == self.weights.len(),
            "the rows have {} features; the model takes {} ({})",
            x.ncols(),
            self.weights.len(),
            self.feature_names.join(", ")
        );
        Ok((0..x.nrows())
            .into_par_iter()
            .map(|i| {
                let row = x.row(i);
                match row.as_slice() {
                    Some(row) => self.logit(row),
                    None => self.logit(&row.to_vec()),
                }
            })
            .collect())
    }

    /// Reads a model file's text, checked as [`ModelFile::load`] checks it.
    ///
    /// # Errors
    /// Not a model file, or one whose parts do not fit together.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let model: ModelFile = serde_json::from_str(text)
            .map_err(|error| anyhow::anyhow!("not a model file: {error}"))?;
        anyhow::ensure!(
            model.weights.len() == model.feature_names.len(),
            "{} weights for {} feature names",
            model.weights.len(),
            model.feature_names.len()
        );
        if let Some(map) = &model.map {
            map.check(model.weights.len())?;
        }
        Ok(model)
    }

    /// The model file's text, as [`ModelFile::save`] writes it.
    ///
    /// # Errors
    /// None in practice (every field serialises).
    pub fn to_json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// A model of `weights` and `intercept` over `feature_names`, made from
    /// `release` of `dataset`, with no training record or map.
    ///
    /// # Errors
    /// A release without an id.
    pub fn of_weights(
        dataset: &Dataset,
        release: &Release,
        weights: Vec<f64>,
        intercept: f64,
        feature_names: Vec<String>,
    ) -> anyhow::Result<Self> {
        Ok(ModelFile {
            weights,
            intercept,
            feature_names,
            label: dataset.label.clone(),
            dataset_id: dataset.id,
            release_id: release
                .id
                .context("the server returned a release without an id")?,
            kind: release.kind.clone(),
            epsilon: release.epsilon,
            delta: release.delta,
            training: None,
            map: None,
        })
    }

    /// The model a server-side release fitted on `dataset` (over its
    /// features in schema order, in raw units); `None` for a release
    /// without one.
    ///
    /// # Errors
    /// A release without an id.
    pub fn of_release(dataset: &Dataset, release: &Release) -> anyhow::Result<Option<Self>> {
        let Some((weights, intercept)) = release.result.as_ref().and_then(ReleaseOutput::model)
        else {
            return Ok(None);
        };
        let names = dataset.features.iter().map(|f| f.name.clone()).collect();
        Self::of_weights(dataset, release, weights.to_vec(), intercept, names).map(Some)
    }

    /// Reads a model file.
    ///
    /// # Errors
    /// I/O, or not a model file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
        Self::from_json(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }

    /// Writes it as pretty JSON.
    ///
    /// # Errors
    /// I/O.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.to_json()?)
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use dpgate_api_types::WalrMap;

    use super::*;

    fn model(map: Option<ModelMap>) -> ModelFile {
        ModelFile {
            weights: vec![1.5, -2.0, 0.75],
            intercept: -0.25,
            feature_names: ["a", "b", "c"].map(str::to_owned).to_vec(),
            label: "y".to_owned(),
            dataset_id: Uuid::nil(),
            release_id: Uuid::nil(),
            kind: "walr".to_owned(),
            epsilon: 1.0,
            delta: 1e-6,
            training: None,
            map,
        }
    }

    /// Bounds [−2, 3] and [10, 20], and a constant third column; a map
    /// that centres and shrinks onto radius 0.6.
    fn map() -> ModelMap {
        ModelMap {
            scaling: Scaling {
                min: vec![-2.0, 10.0, 5.0],
                max: vec![3.0, 20.0, 5.0],
            },
            feature_map: FeatureMap {
                name: WalrMap::Auto,
                centre: vec![0.4, 0.5, 0.1],
                radius: Some(0.6),
                intercept_weight: 0.15,
            },
        }
    }

    #[test]
    fn a_mapped_model_predicts_on_the_map_after_a_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        let saved = model(Some(map()));
        saved.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"intercept_weight\": 0.15"), "{text}");
        let loaded = ModelFile::load(&path).unwrap();
        assert_eq!(loaded, saved);
        // By hand: scale into [0, 1] (clamped; the constant column is 0),
        // centre and scale, shrink onto the radius when beyond it.
        let by_hand = |raw: [f64; 3]| {
            let scaled = [
                ((raw[0] + 2.0) / 5.0).clamp(0.0, 1.0),
                ((raw[1] - 10.0) / 10.0).clamp(0.0, 1.0),
                0.0,
            ];
            let mut v = [scaled[0] - 0.4, scaled[1] - 0.5, scaled[2] - 0.1];
            let norm = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
            if norm > 0.6 {
                v = v.map(|v| v * (0.6 / norm));
            }
            sigmoid(1.5 * v[0] + -2.0 * v[1] + 0.75 * v[2] + -0.25)
        };
        // Inside the ball, shrunk, and beyond the bounds.
        for raw in [[0.0, 15.0, 5.0], [3.0, 10.0, 5.0], [-7.0, 31.0, 2.0]] {
            assert_eq!(loaded.predict(&raw), by_hand(raw), "{raw:?}");
        }
        // The first row: v = (0, 0, −0.1), inside the ball.
        assert_eq!(map().apply(&[0.0, 15.0, 5.0]), [0.0, 0.0, -0.1]);
        // Without the map the same weights mean something else.
        assert_ne!(
            model(None).predict(&[3.0, 10.0, 5.0]),
            by_hand([3.0, 10.0, 5.0])
        );
    }

    #[test]
    fn a_model_file_without_a_map_loads_and_predicts_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.json");
        let old = r#"{"weights": [1.5, -2.0, 0.75], "intercept": -0.25,
            "feature_names": ["a", "b", "c"], "label": "y",
            "dataset_id": "00000000-0000-0000-0000-000000000000",
            "release_id": "00000000-0000-0000-0000-000000000000", "kind": "walr",
            "epsilon": 1.0, "delta": 1e-6}"#;
        std::fs::write(&path, old).unwrap();
        let loaded = ModelFile::load(&path).unwrap();
        assert_eq!(loaded, model(None));
        let raw = [2.0, 0.5, -4.0];
        assert_eq!(
            loaded.predict(&raw),
            sigmoid(1.5 * 2.0 + -2.0 * 0.5 + 0.75 * -4.0 + -0.25)
        );
        loaded.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("map"), "{text}");
    }

    #[test]
    fn a_map_that_does_not_fit_the_weights_is_refused_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.json");
        let mut short_bounds = map();
        short_bounds.scaling.max.pop();
        let mut short_map = map();
        short_map.feature_map.centre.pop();
        let mut weightless = map();
        weightless.feature_map.intercept_weight = 0.0;
        for (map, reason) in [
            (short_bounds, "3 lower and 2 upper bounds for 3 features"),
            (
                short_map,
                "the feature map: the map has 2 centres for 3 features",
            ),
            (
                weightless,
                "the feature map: the map's intercept weight must be",
            ),
        ] {
            model(Some(map)).save(&path).unwrap();
            let error = ModelFile::load(&path).unwrap_err().to_string();
            assert!(error.contains(reason), "{reason}: {error}");
            assert!(error.starts_with(&path.display().to_string()), "{error}");
        }
    }
}
