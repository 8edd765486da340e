//! How an audit is shown: a table for a terminal, one JSON document for
//! scripts (`--json`), and a Markdown report (`--report FILE`).

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::{Finding, Settings};

/// `--json`'s document: `{"results": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub results: Vec<Finding>,
}

fn verdict(finding: &Finding) -> &'static str {
    if finding.pass { "PASS" } else { "FAIL" }
}

/// The rows of the table, header first.
fn rows(findings: &[Finding]) -> Vec<[String; 10]> {
    let mut rows = vec![
        [
            "kind", "variant", "unit", "ε", "δ", "ε̂", "ε̂/ε", "trials", "seconds", "result",
        ]
        .map(str::to_owned),
    ];
    rows.extend(findings.iter().map(|finding| {
        [
            finding.kind.clone(),
            finding.variant.clone(),
            finding.unit.name().to_owned(),
            format!("{}", finding.epsilon),
            format!("{}", finding.delta),
            format!("{:.3}", finding.epsilon_lower),
            format!("{:.2}", finding.epsilon_lower / finding.epsilon),
            finding.trials.to_string(),
            format!("{:.1}", finding.seconds),
            verdict(finding).to_owned(),
        ]
    }));
    rows
}

/// The table a person reads on a terminal, columns aligned.
pub fn table(findings: &[Finding]) -> String {
    let rows = rows(findings);
    let widths: Vec<usize> = (0..10)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:width$}"))
            .collect();
        text += cells.join("  ").trim_end();
        text.push('\n');
    }
    text
}

/// A Markdown report: the settings, the table, and the attacks used.
pub fn markdown(settings: &Settings, findings: &[Finding], seconds: f64) -> String {
    let failed = findings.iter().filter(|finding| !finding.pass).count();
    let mut text = String::from("# dpgate privacy audit\n\n");
    let _ = writeln!(
        text,
        "dpgate {}; {} releases on each of two neighbouring datasets per case; ε = {}, δ = {} \
         (pure ε kinds at δ = 0); dataset seed {}; lower bounds at confidence {}; {:.0} s in \
         all.\n",
        env!("CARGO_PKG_VERSION"),
        settings.trials,
        settings.epsilon,
        settings.delta,
        settings.seed,
        settings.confidence,
        seconds,
    );
    let _ = writeln!(
        text,
        "**{}**: {} of {} cases failed (ε̂ above the claimed ε).\n",
        if failed == 0 { "PASS" } else { "FAIL" },
        failed,
        findings.len()
    );
    let rows = rows(findings);
    for (i, row) in rows.iter().enumerate() {
        text += &format!("| {} |\n", row.join(" | "));
        if i == 0 {
            text += &format!("|{}\n", "---|".repeat(row.len()));
        }
    }
    text += "\nAttacks:\n\n";
    let mut attacks: Vec<(&str, &str)> = findings
        .iter()
        .map(|finding| (finding.kind.as_str(), finding.attack.as_str()))
        .collect();
    attacks.dedup();
    for (kind, attack) in attacks {
        let _ = writeln!(text, "- {kind}: {attack}");
    }
    text
}

#[cfg(test)]
mod tests {
    use dpgate_api_types::PrivacyUnit;

    use super::*;

    fn finding(pass: bool) -> Finding {
        Finding {
            kind: "aggregate".to_owned(),
            variant: "sum, laplace".to_owned(),
            unit: PrivacyUnit::Row,
            epsilon: 1.0,
            delta: 0.0,
            epsilon_lower: if pass { 0.9312 } else { 1.5 },
            trials: 1000,
            attack: "linear (Fisher projection)".to_owned(),
            confidence: 0.95,
            pass,
            seconds: 2.25,
        }
    }

    #[test]
    fn the_table_aligns_its_columns_and_says_pass_or_fail() {
        let table = table(&[finding(true), finding(false)]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("kind       variant       unit"),
            "{table}"
        );
        assert!(
            lines[1].contains("0.931") && lines[1].ends_with("PASS"),
            "{table}"
        );
        assert!(
            lines[2].contains("1.500") && lines[2].ends_with("FAIL"),
            "{table}"
        );
    }

    #[test]
    fn the_json_document_keeps_the_contracted_names() {
        let document = serde_json::to_value(Document {
            results: vec![finding(true)],
        })
        .unwrap();
        let result = &document["results"][0];
        for name in [
            "kind",
            "unit",
            "epsilon",
            "delta",
            "epsilon_lower",
            "trials",
            "attack",
            "pass",
        ] {
            assert!(result.get(name).is_some(), "{name} missing from {result}");
        }
        assert_eq!(result["unit"], "row");
        assert_eq!(result["pass"], true);
    }

    #[test]
    fn the_report_counts_failures() {
        let settings = Settings {
            kinds: vec![],
            units: vec![],
            epsilon: 1.0,
            delta: 1e-5,
            trials: 1000,
            seed: 1,
            confidence: 0.95,
        };
        let report = markdown(&settings, &[finding(true), finding(false)], 12.0);
        assert!(report.contains("**FAIL**: 1 of 2 cases failed"), "{report}");
        assert!(
            report.contains("| aggregate | sum, laplace | row | 1 | 0 | 1.500 |"),
            "{report}"
        );
    }
}
