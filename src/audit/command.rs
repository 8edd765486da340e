//! `dpgate audit`: runs the selected cases with a progress bar on the
//! terminal, then prints the table (or `--json`) and writes the report.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use super::report::{self, Document};
use super::{Scratch, Settings, audit, cases};

/// Where `dpgate audit` writes its findings.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// One JSON document instead of the table.
    pub json: bool,
    /// A Markdown report, also.
    pub report: Option<std::path::PathBuf>,
}

/// Runs the audit; `Ok(false)` when any case failed.
pub async fn run(settings: Settings, output: &Output) -> anyhow::Result<bool> {
    let cases = cases::select(&settings.kinds, &settings.units).map_err(anyhow::Error::msg)?;
    // The audit's process serves no one: the wait that hides a release's
    // drawing time would only slow it (it changes nothing released).
    crate::releases::pacing::skip_holds();
    let scratch = Scratch::open().await?;
    let bar = bar(cases.len() as u64 * 2 * settings.trials);
    let started = Instant::now();
    let mut findings = Vec::with_capacity(cases.len());
    for case in &cases {
        bar.set_message(format!("{} ({}, {:?})", case.kind, case.variant, case.unit));
        let finding = audit(&scratch, case, &settings, &|made| bar.inc(made))
            .await
            .with_context(|| format!("auditing {} ({})", case.kind, case.variant))?;
        findings.push(finding);
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Document {
                results: findings.clone()
            })?
        );
    } else {
        print!("{}", report::table(&findings));
    }
    if let Some(path) = &output.report {
        std::fs::write(path, report::markdown(&settings, &findings, seconds))
            .with_context(|| format!("writing the report {}", path.display()))?;
    }
    Ok(findings.iter().all(|finding| finding.pass))
}

/// A bar over every release the audit makes, on a terminal only.
fn bar(releases: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(releases);
    if let Ok(style) =
        ProgressStyle::with_template("{wide_bar} {pos}/{len} releases, {eta} left  {msg}")
    {
        bar.set_style(style);
    }
    bar
}
