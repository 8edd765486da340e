//! Noise draws whose running time does not show: each is held until a
//! deadline fixed by public facts (the mechanism and its number of
//! coordinates) and by this machine's sampler speed, measured once per
//! process. An exact sampler's time grows with the noise it draws
//! (`src/dp/sample/timing_tests.rs`; docs/privacy-core.md, "Timing"), so a
//! response that came back as soon as the draw finished would tell an
//! observer how large the noise was, and so where the exact value lies.
//! Holding the response to the deadline hides that, unless a draw overruns
//! it, which [`HEADROOM`] makes rare and a metric counts.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::dp::{Delta, Epsilon, Mechanism, OsNoise};

/// Every deadline's floor: scheduling, the hand-off to a blocking thread,
/// and the spread of a small draw.
pub const BASE: Duration = Duration::from_millis(1);

/// A coordinate is given this many times the mean a coordinate took when
/// the samplers were measured.
pub const HEADROOM: u32 = 4;

/// Coordinates drawn per mechanism to measure its speed.
const CALIBRATION_DIMS: usize = 2048;

/// Mean time per coordinate, by mechanism.
#[derive(Debug, Clone, Copy)]
struct Speeds {
    gaussian: Duration,
    laplace: Duration,
    norm_gamma: Duration,
}

/// The slowest of three timed releases of `mechanism`, per coordinate.
fn per_coordinate(mechanism: &Mechanism) -> Duration {
    let zeros = vec![0.0; mechanism.dims()];
    let slowest = (0..3)
        .map(|_| {
            let started = Instant::now();
            // A calibration draw of zeros: nothing private, and a failure
            // only leaves the measurement short, which the floor absorbs.
            let _ = mechanism.release(&zeros, &mut OsNoise::new());
            started.elapsed()
        })
        .max()
        .unwrap_or(BASE);
    slowest / mechanism.dims() as u32
}

fn measure() -> Speeds {
    let epsilon = Epsilon::new(1.0).expect("BUG: 1 is a valid ε");
    let delta = Delta::new(1e-6).expect("BUG: 10⁻⁶ is a valid δ");
    let time = |mechanism: Result<Mechanism, _>| {
        mechanism.map_or(Duration::from_micros(10), |mechanism| {
            per_coordinate(&mechanism)
        })
    };
    Speeds {
        gaussian: time(Mechanism::gaussian(
            epsilon,
            delta,
            1.0,
            CALIBRATION_DIMS,
            1.0,
        )),
        laplace: time(Mechanism::laplace(epsilon, 1.0, CALIBRATION_DIMS, 1.0)),
        norm_gamma: time(Mechanism::norm_gamma(epsilon, 1.0, CALIBRATION_DIMS, 1.0)),
    }
}

fn speeds() -> Speeds {
    static SPEEDS: OnceLock<Speeds> = OnceLock::new();
    *SPEEDS.get_or_init(measure)
}

/// Measures the samplers now rather than on the first release.
pub fn calibrate() {
    speeds();
}

/// How long a release with `mechanism` may take to draw its noise: a
/// function of public facts and of the machine alone.
pub fn budget(mechanism: &Mechanism) -> Duration {
    budget_of_draws(mechanism, 1)
}

/// How long `draws` draws of `mechanism` made one after the other (every
/// step of a learner) may take: the floor once, the coordinates `draws`
/// times.
pub fn budget_of_draws(mechanism: &Mechanism, draws: u32) -> Duration {
    let speeds = speeds();
    let per_coordinate = match mechanism.name() {
        "gaussian" => speeds.gaussian,
        "laplace" => speeds.laplace,
        _ => speeds.norm_gamma,
    };
    let dims = u32::try_from(mechanism.dims()).unwrap_or(u32::MAX);
    BASE.saturating_add(
        per_coordinate
            .saturating_mul(HEADROOM)
            .saturating_mul(dims)
            .saturating_mul(draws),
    )
}

/// Runs `draw` and then sleeps until `budget` has passed since it began:
/// its result, and whether it overran the budget. Run it on a thread of its
/// own (a blocking one): the thread's sleep is precise to tens of
/// microseconds, where the async timer counts whole milliseconds.
pub fn held<T>(budget: Duration, draw: impl FnOnce() -> T) -> (T, bool) {
    let started = Instant::now();
    let drawn = draw();
    let elapsed = started.elapsed();
    if let Some(rest) = budget.checked_sub(elapsed) {
        std::thread::sleep(rest);
    }
    (drawn, elapsed > budget)
}

/// [`held`], counting a draw that overran its budget.
pub fn paced<T>(budget: Duration, draw: impl FnOnce() -> T) -> T {
    let (drawn, overran) = held(budget, draw);
    if overran {
        metrics::counter!("dpgate_noise_overruns_total").increment(1);
    }
    drawn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_is_held_to_its_budget_however_fast_it_was() {
        let started = Instant::now();
        let (value, overran) = held(Duration::from_millis(30), || 7);
        assert_eq!((value, overran), (7, false));
        assert!(started.elapsed() >= Duration::from_millis(30));
        // One that overran is let go at once, and says so.
        let (_, overran) = held(Duration::from_millis(1), || {
            std::thread::sleep(Duration::from_millis(5));
        });
        assert!(overran);
    }

    #[test]
    fn the_budget_grows_with_the_coordinates_and_never_drops_below_the_base() {
        let epsilon = Epsilon::new(1.0).unwrap();
        let small = Mechanism::laplace(epsilon, 1.0, 1, 1.0).unwrap();
        let large = Mechanism::laplace(epsilon, 1.0, 10_000, 1.0).unwrap();
        assert!(budget(&small) >= BASE);
        assert!(budget(&large) > budget(&small));
        // The same mechanism always gets the same budget.
        assert_eq!(budget(&large), budget(&large));
        // T draws in a row pay the floor once.
        let hundred = budget_of_draws(&small, 100);
        assert!(hundred > budget(&small));
        assert!(hundred < budget(&small) * 100);
    }
}
