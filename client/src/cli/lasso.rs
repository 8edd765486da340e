//! `dpgate-client train-lasso`: L1-regularised logistic regression by
//! distributed ISTA ([`crate::lasso`]) over datasets on one server or
//! several, each holder a pre-paid `gradient` session of T calls (debited
//! once, as their exact composition), saved as a model file like `train`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use dpgate_api_types::{
    Dataset, GradientCall, GradientLoss, GradientMechanism, GradientParams, ReleaseParams,
    ReleaseRequest, ReleaseResult,
};
use uuid::Uuid;

use super::{print_json, progress};
use crate::lasso::{Holder, Ista};
use crate::model_file::ModelFile;
use crate::{Client, ReleaseOptions, Timeouts};

#[derive(Debug, Clone, Args)]
pub struct LassoArgs {
    /// A holder's dataset; repeat for each holder.
    #[arg(long = "dataset", required = true)]
    pub datasets: Vec<Uuid>,
    /// The server of the holder given in the same position (the holders
    /// after the last one given use --url).
    #[arg(long = "server")]
    pub servers: Vec<String>,
    /// A file holding the token for the --server given in the same
    /// position, for servers that do not accept --token (each operator
    /// mints its own); a file, not the token itself, to keep it out of
    /// the process list.
    #[arg(long = "server-token-file")]
    pub server_tokens: Vec<PathBuf>,
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
    home: &Client,
    timeouts: Timeouts,
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
        epsilon: Some(args.epsilon),
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
    anyhow::ensure!(
        args.server_tokens.len() <= args.servers.len(),
        "{} --server-token-file for {} --server: give at most one token file per server",
        args.server_tokens.len(),
        args.servers.len()
    );
    // Every holder is read and priced before any session is opened, so
    // that one refusing (its token, its features, its budget) leaves no
    // other holder debited for a run that cannot happen.
    let (holders, first) = price_holders(home, timeouts, args, &request).await?;
    let sessions = open_sessions(holders, &request).await?;
    let names: Vec<String> = first.features.iter().map(|f| f.name.clone()).collect();
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
    let min: Vec<f64> = first.features.iter().map(|f| f.min).collect();
    let max: Vec<f64> = first.features.iter().map(|f| f.max).collect();
    let (weights, intercept) = dpgate_learn::unscale(weights, intercept, &min, &max);
    let model = ModelFile {
        weights,
        intercept,
        feature_names: names,
        label: first.label,
        dataset_id: sessions[0].dataset,
        release_id: sessions[0].release,
        kind: "gradient".to_owned(),
        epsilon: args.epsilon,
        delta: args.delta,
        training: None,
        map: None,
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

/// Each holder's client and dataset, once every one has been read and the
/// session priced on it, and the first holder's view (whose features all
/// share).
async fn price_holders(
    home: &Client,
    timeouts: Timeouts,
    args: &LassoArgs,
    request: &ReleaseRequest,
) -> anyhow::Result<(Vec<(Client, Uuid)>, Dataset)> {
    let mut holders: Vec<(Client, Uuid)> = Vec::with_capacity(args.datasets.len());
    let mut first: Option<Dataset> = None;
    for (index, &dataset) in args.datasets.iter().enumerate() {
        let server = args.servers.get(index).map_or(home.base(), String::as_str);
        let token = match args.server_tokens.get(index) {
            Some(path) => Some(read_token(path)?),
            None => home.token().map(str::to_owned),
        };
        let client = Client::with_timeouts(server, token, timeouts);
        let view = client
            .dataset(dataset)
            .await
            .with_context(|| format!("reading dataset {dataset} on {server}"))?;
        match &first {
            None => first = Some(view),
            // Gradients in the scaled space only average if every holder
            // scales the same features the same way.
            Some(first) => anyhow::ensure!(
                first.features == view.features,
                "dataset {dataset} has other features or bounds than {}: {:?} against {:?}",
                first.id,
                view.features,
                first.features
            ),
        }
        let dry_run = ReleaseOptions {
            dry_run: true,
            ..ReleaseOptions::default()
        };
        client
            .release(dataset, request, &dry_run)
            .await
            .with_context(|| format!("pricing a gradient session on {dataset} on {server}"))?;
        holders.push((client, dataset));
    }
    let first = first.context("no dataset given")?;
    Ok((holders, first))
}

/// Opens the pre-paid gradient session on every holder.
async fn open_sessions(
    holders: Vec<(Client, Uuid)>,
    request: &ReleaseRequest,
) -> anyhow::Result<Vec<Session>> {
    let mut sessions = Vec::with_capacity(holders.len());
    for (client, dataset) in holders {
        let release = client
            .release(dataset, request, &ReleaseOptions::default())
            .await
            .with_context(|| format!("opening a gradient session on {dataset}"))?
            .release;
        let Some(ReleaseResult::Gradient(result)) = &release.result else {
            anyhow::bail!(
                "dataset {dataset}'s server answered a gradient session with another result"
            );
        };
        sessions.push(Session {
            client,
            dataset,
            release: release.id.context("a session without a release id")?,
            // Under privacy unit `user` N is private: the holder is
            // weighed by the session's noisy count instead.
            n: result.n.unwrap_or_else(|| {
                result
                    .noisy_rows
                    .map_or(1, |rows| rows.max(1.0).round() as u64)
            }),
        });
    }
    Ok(sessions)
}

/// The token in `path`, without the line break an editor or `echo` adds.
fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let token = token.trim();
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        path.display()
    );
    Ok(token.to_owned())
}
