//! `dpgate-client train-lasso`: L1-regularised logistic regression by
//! distributed ISTA ([`crate::lasso`]) over datasets on one server or
//! several, each holder a pre-paid `gradient` session of T calls (debited
//! once, as their exact composition), saved as a model file like `train`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use dpgate_api_types::{
    GradientCall, GradientLoss, GradientMechanism, GradientParams, ReleaseParams, ReleaseRequest,
    ReleaseResult,
};
use uuid::Uuid;

use super::{print_json, progress};
use crate::lasso::{Holder, Ista};
use crate::model_file::ModelFile;
use crate::{Client, ReleaseOptions};

#[derive(Debug, Clone, Args)]
pub struct LassoArgs {
    /// A holder's dataset; repeat for each holder.
    #[arg(long = "dataset", required = true)]
    pub datasets: Vec<Uuid>,
    /// The server of the holder given in the same position (the holders
    /// after the last one given use --url). The token must be valid on
    /// every server.
    #[arg(long = "server")]
    pub servers: Vec<String>,
    /// ε each holder spends on the whole run (T calls together).
    #[arg(long)]
    pub epsilon: f64,
    /// δ each holder spends on the whole run.
    #[arg(long)]
    pub delta: f64,
    /// T, the number of ISTA steps (one gradient call per holder each).
    #[arg(long, default_value_t = 100)]
    pub steps: u32,
    /// η, in the space of the features scaled into [0, 1].
    #[arg(long, default_value_t = 0.5)]
    pub learning_rate: f64,
    /// λ of λ‖w‖₁ (the intercept is not penalised).
    #[arg(long, default_value_t = 1e-3)]
    pub lambda: f64,
    /// C, the L2 bound on each row's gradient.
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    #[arg(long)]
    pub no_intercept: bool,
    /// Where to save the model file.
    #[arg(long)]
    pub out: PathBuf,
}

/// One holder's open session.
struct Session {
    client: Client,
    dataset: Uuid,
    release: Uuid,
    n: u64,
}

impl Holder for Session {
    fn n(&self) -> u64 {
        self.n
    }

    async fn gradient(&self, call: u32, theta: &[f64]) -> anyhow::Result<Vec<f64>> {
        let request = GradientCall {
            call,
            theta: theta.to_vec(),
        };
        let answer = self
            .client
            .gradient_call(self.dataset, self.release, &request)
            .await
            .with_context(|| format!("call {call} on dataset {}", self.dataset))?;
        Ok(answer.gradient)
    }
}

/// Opens every holder's session, runs ISTA and saves the model.
pub async fn train_lasso(
    url: &str,
    token: Option<&str>,
    args: &LassoArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.servers.len() <= args.datasets.len(),
        "{} --server for {} --dataset: give at most one server per dataset",
        args.servers.len(),
        args.datasets.len()
    );
    let request = ReleaseRequest {
        epsilon: args.epsilon,
        delta: Some(args.delta),
        params: ReleaseParams::Gradient(GradientParams {
            loss: GradientLoss::Logistic,
            target: "label".to_owned(),
            label_values: None,
            clip: args.clip,
            fit_intercept: !args.no_intercept,
            mechanism: GradientMechanism::Gaussian,
            theta: None,
            calls: Some(args.steps),
        }),
    };
    let mut sessions = Vec::with_capacity(args.datasets.len());
    let mut shared: Option<(Vec<String>, String, Vec<[f64; 2]>)> = None;
    for (index, &dataset) in args.datasets.iter().enumerate() {
        let server = args.servers.get(index).map_or(url, String::as_str);
        let client = Client::new(server, token.map(str::to_owned));
        let view = client.dataset(dataset).await?;
        let names: Vec<String> = view.features.iter().map(|f| f.name.clone()).collect();
        let release = client
            .release(dataset, &request, &ReleaseOptions::default())
            .await
            .with_context(|| format!("opening a gradient session on {dataset}"))?
            .release;
        let Some(ReleaseResult::Gradient(result)) = &release.result else {
            anyhow::bail!("{server} answered a gradient session with another result");
        };
        let this = (names, view.label, result.feature_bounds.clone());
        match &shared {
            None => shared = Some(this),
            // Gradients in the scaled space only average if every holder
            // scales the same features the same way.
            Some(first) => anyhow::ensure!(
                first.0 == this.0 && first.2 == this.2,
                "dataset {dataset} has other features or bounds than {}: {:?} against {:?}",
                args.datasets[0],
                this.0,
                first.0
            ),
        }
        sessions.push(Session {
            client,
            dataset,
            release: release.id.context("a session without a release id")?,
            n: result.n,
        });
    }
    let (names, label, bounds) = shared.context("no dataset given")?;
    let ista = Ista {
        steps: args.steps,
        learning_rate: args.learning_rate,
        lambda: args.lambda,
        fit_intercept: !args.no_intercept,
    };
    let bar = progress(
        json,
        Some(u64::from(args.steps)),
        "ISTA {bar:30} {pos}/{len} steps",
    );
    let dims = names.len() + usize::from(ista.fit_intercept);
    let theta = ista
        .run(&sessions, dims, |done| bar.set_position(u64::from(done)))
        .await?;
    bar.finish_and_clear();
    let (intercept, weights) = if ista.fit_intercept {
        (theta[0], &theta[1..])
    } else {
        (0.0, &theta[..])
    };
    let min: Vec<f64> = bounds.iter().map(|b| b[0]).collect();
    let max: Vec<f64> = bounds.iter().map(|b| b[1]).collect();
    let (weights, intercept) = dpgate_learn::unscale(weights, intercept, &min, &max);
    let model = ModelFile {
        weights,
        intercept,
        feature_names: names,
        label,
        dataset_id: sessions[0].dataset,
        release_id: sessions[0].release,
        kind: "gradient".to_owned(),
        epsilon: args.epsilon,
        delta: args.delta,
        training: None,
    };
    model.save(&args.out)?;
    if json {
        return print_json(out, &model);
    }
    let zeros = theta
        .iter()
        .skip(usize::from(ista.fit_intercept))
        .filter(|w| **w == 0.0)
        .count();
    writeln!(
        out,
        "{} steps over {} holders ({} rows), each spending ε = {}, δ = {}; {zeros} of {} \
         weights exactly 0\nmodel file: {}",
        args.steps,
        sessions.len(),
        sessions.iter().map(|s| s.n).sum::<u64>(),
        args.epsilon,
        args.delta,
        model.weights.len(),
        args.out.display()
    )?;
    Ok(())
}
