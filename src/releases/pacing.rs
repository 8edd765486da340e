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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::dp::{Delta, Drawn, Epsilon, Mechanism, OsNoise, SelectionRule, Selector};

/// Every deadline's floor: scheduling, the hand-off to a blocking thread,
/// and the spread of a small draw.
pub const BASE: Duration = Duration::from_millis(1);

/// A coordinate is given this many times the mean a coordinate took when
/// the samplers were measured.
pub const HEADROOM: u32 = 4;

/// Coordinates drawn per mechanism to measure its speed.
const CALIBRATION_DIMS: usize = 2048;

/// Set by [`skip_holds`]: every deadline is then ignored.
static UNHELD: AtomicBool = AtomicBool::new(false);

/// Stops holding draws to their deadlines, for the rest of this process:
/// `dpgate audit` makes millions of releases on scratch data, in a process
/// of its own that serves no one, and the wait does not change what is
/// released. The server never calls it.
pub fn skip_holds() {
    UNHELD.store(true, Ordering::Relaxed);
}

fn holding() -> bool {
    !UNHELD.load(Ordering::Relaxed)
}

/// Mean time per coordinate, by mechanism, and per proposal of the
/// exponential selection.
#[derive(Debug, Clone, Copy)]
struct Speeds {
    gaussian: Duration,
    laplace: Duration,
    norm_gamma: Duration,
    proposal: Duration,
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

/// The slowest of three timed runs of exponential selections, per
/// proposal, on scores one temperature above the least (where a proposal's
/// acceptance test takes longest), until each run has made
/// [`CALIBRATION_DIMS`] proposals.
fn per_proposal() -> Duration {
    let epsilon = Epsilon::new(1.0).expect("BUG: 1 is a valid ε");
    let Ok(selector) = Selector::new(SelectionRule::Exponential, epsilon, 1.0, 4.0) else {
        return Duration::from_micros(10);
    };
    let mut scores = vec![selector.scale(); CALIBRATION_DIMS];
    scores[0] = 0.0;
    let mut rng = OsNoise::new();
    (0..3)
        .map(|_| {
            let started = Instant::now();
            let mut proposals = 0;
            while proposals < CALIBRATION_DIMS as u64 {
                // Calibration scores: nothing private; a failure cannot
                // happen on them, and would only end the run early.
                match selector.select_counted(&scores, &mut rng) {
                    Ok((_, drawn)) => proposals += drawn,
                    Err(_) => break,
                }
            }
            started.elapsed() / proposals.max(1) as u32
        })
        .max()
        .unwrap_or(BASE)
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
        proposal: per_proposal(),
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

/// How long `selections` private selections in a row among `candidates`
/// scores may take: the floor once, and each draw of their
/// [`Selector::allowance`] (a discrete Laplace value, costed as two
/// coordinates, or an exponential proposal) given its headroom.
pub fn budget_of_selections(selector: &Selector, candidates: usize, selections: u32) -> Duration {
    let speeds = speeds();
    let per_draw = match selector.rule() {
        SelectionRule::Exponential => speeds.proposal,
        SelectionRule::Laplace => speeds.laplace * 2,
    };
    let draws = u32::try_from(selector.allowance(candidates, selections)).unwrap_or(u32::MAX);
    BASE.saturating_add(per_draw.saturating_mul(HEADROOM).saturating_mul(draws))
}

/// One deadline for draws made between other work whose time is public
/// (a Frank-Wolfe stage's selections between its passes over the rows):
/// the draws' time is added up, and when the meter is dropped, on every
/// path, it sleeps until the draws have had their whole budget, so the
/// total shows only the budget, unless they overran it, which is counted.
pub struct Meter {
    budget: Duration,
    spent: Duration,
}

impl Meter {
    pub fn new(budget: Duration) -> Self {
        Meter {
            budget,
            spent: Duration::ZERO,
        }
    }

    /// Runs `draw`, counting its time against the budget.
    pub fn time<T>(&mut self, draw: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let drawn = draw();
        self.spent += started.elapsed();
        drawn
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        match self.budget.checked_sub(self.spent) {
            Some(rest) if holding() => std::thread::sleep(rest),
            Some(_) => {}
            None => metrics::counter!("dpgate_noise_overruns_total").increment(1),
        }
    }
}

/// Runs `draw` and then sleeps until `budget` has passed since it began:
/// its result, and whether it overran the budget. Run it on a thread of its
/// own (a blocking one): the thread's sleep is precise to tens of
/// microseconds, where the async timer counts whole milliseconds.
pub fn held<T>(budget: Duration, draw: impl FnOnce() -> T) -> (T, bool) {
    let started = Instant::now();
    let drawn = draw();
    let elapsed = started.elapsed();
    if let Some(rest) = budget.checked_sub(elapsed)
        && holding()
    {
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

/// Most noise coordinates a learner holds at once: its steps' noise is
/// drawn ahead in blocks of about this many (16 MiB), each held to its own
/// budget, so a release of many steps neither keeps all its noise in
/// memory nor shows how long any of it took to draw.
const BLOCK_COORDINATES: usize = 1 << 20;

/// The noise of a learner's `steps` steps, one [`Drawn`] per step, drawn
/// from the OS CSPRNG in [`paced`] blocks before the steps that use them.
pub struct StepNoise<'a> {
    mechanism: &'a Mechanism,
    left: u64,
    block: std::vec::IntoIter<Drawn>,
    rng: OsNoise,
}

impl<'a> StepNoise<'a> {
    pub fn new(mechanism: &'a Mechanism, steps: u64) -> Self {
        StepNoise {
            mechanism,
            left: steps,
            block: Vec::new().into_iter(),
            rng: OsNoise::new(),
        }
    }
}

/// The next step's noise; `None` once every step has had its own.
impl Iterator for StepNoise<'_> {
    type Item = Drawn;

    fn next(&mut self) -> Option<Drawn> {
        if let Some(drawn) = self.block.next() {
            return Some(drawn);
        }
        let per_block = (BLOCK_COORDINATES / self.mechanism.dims()).max(1) as u64;
        let draws = self.left.min(per_block);
        if draws == 0 {
            return None;
        }
        self.left -= draws;
        let (mechanism, rng) = (self.mechanism, &mut self.rng);
        // At most 2^20 draws: the cast is exact.
        let budget = budget_of_draws(mechanism, draws as u32);
        let block: Vec<Drawn> = paced(budget, || (0..draws).map(|_| mechanism.draw(rng)).collect());
        self.block = block.into_iter();
        self.block.next()
    }
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

    #[test]
    fn a_meter_holds_its_draws_together_to_one_budget_on_every_path() {
        let started = Instant::now();
        {
            let mut meter = Meter::new(Duration::from_millis(30));
            assert_eq!(meter.time(|| 1), 1);
            // Public work between the draws is not counted against them.
            std::thread::sleep(Duration::from_millis(10));
            assert_eq!(meter.time(|| 2), 2);
        }
        assert!(started.elapsed() >= Duration::from_millis(40));
        // A stage that stops at an error is held all the same.
        let started = Instant::now();
        let stopped = || -> Result<(), &'static str> {
            let mut meter = Meter::new(Duration::from_millis(20));
            meter.time(|| Err("no scores"))?;
            Ok(())
        };
        assert_eq!(stopped(), Err("no scores"));
        assert!(started.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_selection_budget_covers_its_allowance_and_grows_with_the_steps() {
        let epsilon = Epsilon::new(0.06).unwrap();
        for rule in [SelectionRule::Laplace, SelectionRule::Exponential] {
            let selector = Selector::new(rule, epsilon, 1.0, 100.0).unwrap();
            let one = budget_of_selections(&selector, 66, 1);
            let fifty = budget_of_selections(&selector, 66, 50);
            assert!(one > BASE && fifty > one, "{rule:?}");
            assert_eq!(fifty, budget_of_selections(&selector, 66, 50));
            assert!(
                budget_of_selections(&selector, 8192, 50) > fifty,
                "{rule:?}"
            );
        }
    }

    #[test]
    fn step_noise_gives_each_step_its_own_draw_across_blocks() {
        let epsilon = Epsilon::new(1.0).unwrap();
        // 2^19 coordinates a draw: two draws a block.
        let dims = BLOCK_COORDINATES / 2;
        let mechanism = Mechanism::laplace(epsilon, 1.0, dims, 1.0).unwrap();
        let noise = StepNoise::new(&mechanism, 5);
        let zeros = vec![0.0; dims];
        let steps: Vec<Vec<f64>> = noise
            .map(|drawn| mechanism.add(&zeros, &drawn).unwrap())
            .collect();
        assert_eq!(steps.len(), 5);
        for (index, step) in steps.iter().enumerate() {
            for other in &steps[..index] {
                assert_ne!(step, other, "step {index} repeats an earlier draw");
            }
        }
    }
}
