//! `dpgate-client release <kind>`: one subcommand a kind, each in a file
//! of its own (its flags, the request they make, how its result reads),
//! registered in `kinds!` with one line.

mod aggregate;
mod dp_gd;
mod dp_sgd;
mod frank_wolfe;
mod model;
mod walr;

use std::io::Write;
use std::path::Path;

use clap::{ArgGroup, Args, Subcommand};
use dpgate_api_types::{ReleaseOutput, ReleaseParams, ReleaseRequest, ReleaseResult};
use uuid::Uuid;

use super::{describe, print_json, spinner};
use crate::model_file::ModelFile;
use crate::{Client, ReleaseOptions};
pub use walr::MapArg;

/// What every release asks. Its price is ε, or for the kinds that take one
/// a target noise (which joins the group `price`), never both.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("price").required(true)))]
pub struct Spend {
    #[arg(long)]
    pub dataset: Uuid,
    /// The release's ε (required unless the kind's target noise is given).
    #[arg(long, group = "price")]
    pub epsilon: Option<f64>,
    /// Omit for pure ε where the kind allows it.
    #[arg(long)]
    pub delta: Option<f64>,
    /// Price the release without spending anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Reuse a key to get the same release back (default: a fresh key, so
    /// that network retries never spend twice).
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

impl Spend {
    fn options(&self) -> ReleaseOptions {
        ReleaseOptions {
            idempotency_key: self.idempotency_key.clone(),
            dry_run: self.dry_run,
        }
    }
}

/// A kind's subcommand: what it spends and the request its flags make.
trait Kind {
    fn spend(&self) -> &Spend;

    /// Where to save the model as a model file, for the kinds that fit one.
    fn model_out(&self) -> Option<&Path> {
        None
    }

    /// The kind's parameters (reading the files, or asking the server for
    /// what, a flag names).
    async fn params(&self, client: &Client) -> anyhow::Result<ReleaseParams>;
}

/// Declares the kinds' subcommands, one line each (with its help):
/// `Variant(ArgsType)`, the type a [`Kind`].
macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident($args:ty)),+ $(,)?) => {
        #[derive(Debug, Subcommand)]
        pub enum ReleaseKind {
            $($(#[$doc])* $variant($args),)+
        }

        /// Makes the release `kind` asks for and prints it.
        pub(super) async fn release(
            client: &Client,
            kind: ReleaseKind,
            json: bool,
            out: &mut (dyn Write + Send),
        ) -> anyhow::Result<()> {
            match kind {
                $(ReleaseKind::$variant(args) => released(client, &args, json, out).await,)+
            }
        }
    };
}

kinds! {
    /// The WALR noisy dot product.
    Walr(walr::WalrArgs),
    /// Counts, sums and means, optionally grouped.
    Aggregate(aggregate::AggregateArgs),
    /// A private logistic-regression model fitted on the server.
    Model(model::ModelArgs),
    /// Logistic regression by DP gradient descent on the server: clipped
    /// per-row gradients, Gaussian noise at every step.
    DpGd(dp_gd::DpGdArgs),
    /// Logistic regression by DP-SGD on the server: disjoint batches, each
    /// batch's clipped gradient sum released with norm-Gamma noise; pure ε.
    DpSgd(dp_sgd::DpSgdArgs),
    /// Linear regression by DP Frank-Wolfe on an L1 ball, over the dataset
    /// and any source datasets (each of which is debited the same).
    FrankWolfe(frank_wolfe::FrankWolfeArgs),
}

/// Makes the release `args` ask for, saves its model if asked to, and
/// prints it.
async fn released(
    client: &Client,
    args: &impl Kind,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let spend = args.spend();
    let request = ReleaseRequest {
        epsilon: spend.epsilon,
        delta: spend.delta,
        params: args.params(client).await?,
    };
    let spinner = spinner(json, "releasing");
    let released = client
        .release(spend.dataset, &request, &spend.options())
        .await;
    spinner.finish_and_clear();
    let release = released?.release;
    let saved = match args.model_out() {
        Some(path)
            if release
                .result
                .as_ref()
                .and_then(ReleaseOutput::model)
                .is_some() =>
        {
            let dataset = client.dataset(spend.dataset).await?;
            if let Some(model) = ModelFile::of_release(&dataset, &release)? {
                model.save(path)?;
            }
            Some(path)
        }
        _ => None,
    };
    if json {
        return print_json(out, &release);
    }
    describe(out, &release)?;
    if let Some(result) = &release.result {
        print_result(result, out)?;
    }
    if let Some(path) = saved {
        writeln!(out, "model file: {}", path.display())?;
    }
    Ok(())
}

/// The lines a result adds to the price lines.
fn print_result(result: &ReleaseResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    match result {
        ReleaseResult::Walr(result) => walr::print(result, out)?,
        ReleaseResult::Aggregate(result) => aggregate::print(result, out)?,
        ReleaseResult::Model(_) => {}
        ReleaseResult::DpGd(result) => dp_gd::print(result, out)?,
        ReleaseResult::DpSgd(result) => dp_sgd::print(result, out)?,
        ReleaseResult::FrankWolfe(result) => frank_wolfe::print(result, out)?,
        ReleaseResult::Gradient(result) => {
            writeln!(
                out,
                "{:?} loss on {}, C = {}, ε = {} per call, σ = {:.6e}",
                result.loss, result.target, result.clip, result.call_epsilon, result.sigma
            )?;
            if let Some(gradient) = &result.gradient {
                writeln!(out, "gradient (model space): {gradient:?}")?;
            }
            if let Some(session) = result.session {
                writeln!(out, "session of {} calls", session.calls)?;
            }
        }
    }
    if let Some((weights, intercept)) = result.model() {
        writeln!(out, "weights: {weights:?}\nintercept: {intercept}")?;
    }
    Ok(())
}
