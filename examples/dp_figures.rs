//! Prints the privacy-core figures quoted in `docs/privacy-core.md`:
//! `cargo run --release --example dp_figures`.

use dpgate::dp::{
    Accountant, Budget, Charge, Composition, Delta, Epsilon, Mechanism, analytic_sigma,
    classic_sigma,
};

fn main() -> Result<(), dpgate::dp::DpError> {
    println!("σ_analytic / σ_classic (Δ = 1)");
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>8}",
        "ε", "δ", "analytic", "classic", "ratio"
    );
    for epsilon in [0.1, 1.0, 5.0] {
        for delta in [1e-6, 1e-9] {
            let analytic = analytic_sigma(epsilon, delta, 1.0)?;
            let classic = classic_sigma(epsilon, delta, 1.0)?;
            println!(
                "{epsilon:>8} {delta:>10.0e} {analytic:>12.6} {classic:>12.6} {:>8.4}",
                analytic / classic
            );
        }
    }

    // 100 Gaussian releases, each calibrated to (ε = 0.1, δ = 1e-7) exactly
    // as the service calibrates them (on the lattice, for a 33-coordinate
    // WALR vector of sensitivity 1e-6), against δ_total = 1e-5.
    let mechanism = Mechanism::gaussian(Epsilon::new(0.1)?, Delta::new(1e-7)?, 1e-6, 33, 1.0)?;
    let charge = Charge {
        epsilon: Epsilon::new(0.1)?,
        delta: Delta::new(1e-7)?,
        loss: mechanism.loss().clone(),
    };
    let budget = Budget {
        epsilon: Epsilon::new(100.0)?,
        delta: Delta::positive(1e-5)?,
    };
    let ledger = Composition::of(&vec![charge; 100]);
    let rdp = ledger.spent(Accountant::Rdp, &budget);
    let basic = ledger.spent(Accountant::Basic, &budget);
    println!("\n100 Gaussian releases at (0.1, 1e-7), δ_total = 1e-5");
    println!(
        "  rdp:   ε = {:.9}, δ = {:e}",
        rdp.epsilon.value(),
        rdp.delta.value()
    );
    println!(
        "  basic: ε = {:.9}, δ = {:e}",
        basic.epsilon.value(),
        basic.delta.value()
    );
    Ok(())
}
