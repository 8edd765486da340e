#!/usr/bin/env python3
"""Independent reference values for the iterative learners' privacy math.

What it computes (written to ``learners.json`` next to this script):

* ``dp_gd`` -- for full-batch DP-GD (LEARNERS.md section 1) at several
  (eps, delta, N, C, k, T), unit ``row``:
  - ``sensitivity``: Delta = 2 min(C, sqrt(d))/N with d = k + 1 (intercept);
  - ``sigma``: the smallest per-step sigma whose T-fold composition is
    (eps, delta)-DP. T Gaussian steps of sensitivity Delta and noise sigma
    are exactly one Gaussian with mu = sqrt(T) Delta/sigma (Dong, Roth &
    Su 2022, Cor. 3.3), so sigma is found by bisection on
    delta(mu(sigma), eps) <= delta with Balle & Wang 2018, Thm 8;
  - ``sigma_slides``: the seed-000 slides' sigma = (2C/(N eps))
    sqrt(2 T ln(1.25/delta)) (per-example clipping, C <= sqrt(d));
  - ``epsilon_of_slides_sigma``: the eps that sigma_slides really delivers
    at delta, from the same exact curve.

* ``pure_epochs`` -- what E epochs of DP-SGD at eps_e each cost on the
  ledger (LEARNERS.md section 2): basic E eps_e, and the RDP accountant's
  eps at delta for the E-fold composition of a pure eps_e-DP mechanism,
  whose RDP curve is bounded by eps_e-randomized response's (capped at
  eps_e), converted on the ledger's orders (from ``make_reference.py``).

* ``per_step`` -- the largest per-step eps_0 whose T-fold composition the
  ledger prices at <= eps at delta (LEARNERS.md sections 3 and 4): for
  pure eps_0 steps (Frank-Wolfe's Laplace selection), min(RDP conversion
  of T x the randomized-response bound, T eps_0) <= eps; for eps_0-bounded-
  range steps (Frank-Wolfe's exponential selection) the same with each
  order's bound also capped at a eps_0^2/8 (Cesar & Rogers 2021: eps-BR is
  eps^2/8-zCDP); for Gaussian steps
  each calibrated (analytic) to (eps_0, delta) (gradient calls), T of them
  are one Gaussian of mu = sqrt(T) mu(eps_0, delta), so eps_0 =
  eps_GDP(mu(eps, delta)/sqrt(T), delta). Bisection in 50 digits; the Rust
  value is the same on the ledger's 1e-9 grid, rounded down.

Independence from the Rust code: the Rust mechanism computes
sqrt(T) * sigma_analytic(eps, delta, Delta') with its own root finder in
double precision; this script bisects sigma directly on the composed
mu in 50-digit arithmetic (make_reference's analytic bisection on sqrt(T) Delta). The Rust sigma also covers each step's lattice
rounding (Delta' = Delta + gamma sqrt(d), which its test bounds from the
lattice gamma it chose) and rounds sigma up to whole lattice units.

Run: python3 src/dp/testdata/make_learners.py (mpmath only; a few seconds).
"""

import json
import platform
from pathlib import Path

import mpmath
from mpmath import mp, mpf

from make_reference import ORDERS, analytic_gaussian_sigma, randomized_response_rdp, rdp_to_epsilon

mp.dps = 50

OUT_PATH = Path(__file__).resolve().parent / "learners.json"


def gaussian_delta(mu, eps):
    """Balle & Wang 2018, Thm 8: delta(eps) of a Gaussian with mu = Delta/sigma."""
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def composed_sigma(eps, delta, sens, steps):
    """Smallest sigma with delta(sqrt(T) sens/sigma, eps) <= delta: T steps of sigma on
    sens are one Gaussian on sqrt(T) sens, so make_reference's analytic bisection applies."""
    return analytic_gaussian_sigma(eps, delta, mpmath.sqrt(steps) * mpf(sens))


def bisect(lo, hi, low_side, width):
    """Narrows [lo, hi] to below `width`, keeping low_side(lo) and not low_side(hi)."""
    while hi - lo >= width:
        mid = (lo + hi) / 2
        if low_side(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def delivered_epsilon(mu, delta):
    """Smallest eps with delta(mu, eps) <= delta, by bisection."""
    mu, delta = mpf(mu), mpf(delta)
    lo, hi = mpf(0), mpf(1)
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    return bisect(lo, hi, lambda eps: gaussian_delta(mu, eps) > delta, mpf("1e-25"))[1]


# (eps, delta, N, C, k, T): the slides' setup (N = 400, C = 1, k = 2,
# T = 50, delta = 1e-5) over their eps grid, then large N, small C, a
# C above sqrt(d), and one step.
DP_GD_POINTS = [
    (eps, 1e-5, 400, 1.0, 2, 50) for eps in (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 15.0, 150.0)
] + [
    (1.0, 1e-6, 1_000_000, 1.0, 32, 100),
    (0.5, 1e-8, 1000, 0.1, 10, 1000),
    (2.0, 1e-6, 50_000, 10.0, 3, 1),
    (0.1, 1e-10, 10_000, 0.5, 100, 10_000),
]


def dp_gd_section():
    points = []
    for eps, delta, n, clip, k, steps in DP_GD_POINTS:
        d = k + 1
        sens = 2 * min(mpf(clip), mpmath.sqrt(d)) / n
        sigma = composed_sigma(eps, delta, sens, steps)
        slides = (2 * mpf(clip) / (n * mpf(eps))) * mpmath.sqrt(
            2 * steps * mpmath.log(mpf("1.25") / mpf(delta))
        )
        delivered = delivered_epsilon(mpmath.sqrt(steps) * sens / slides, delta)
        points.append(
            {
                "epsilon": eps,
                "delta": delta,
                "n": n,
                "clip": clip,
                "k": k,
                "steps": steps,
                "sensitivity": float(sens),
                "sigma": float(sigma),
                "sigma_slides": float(slides),
                "epsilon_of_slides_sigma": float(delivered),
            }
        )
    return points


# (eps_e, E, delta): LEARNERS.md's table, then a small eps_e at a small delta.
PURE_EPOCHS = [(0.1, 10, 1e-6), (0.1, 100, 1e-6), (1.0, 100, 1e-6), (0.01, 50, 1e-9)]


def pure_epochs_section():
    points = []
    for eps, epochs, delta in PURE_EPOCHS:
        curve = [epochs * min(randomized_response_rdp(a, eps), mpf(eps)) for a in ORDERS]
        points.append(
            {
                "epoch_epsilon": eps,
                "epochs": epochs,
                "delta": delta,
                "basic": eps * epochs,
                "rdp": float(min(rdp_to_epsilon(curve, delta), mpf(eps) * epochs)),
            }
        )
    return points


# (loss, eps, delta, T): LEARNERS.md's Frank-Wolfe setting and its
# gradient-session table, then a large eps; then exponential selection at
# the Frank-Wolfe setting and two more, with Laplace selection beside them.
PER_STEP = [
    ("pure", 1.0, 1e-6, 50),
    ("pure", 1.0, 1e-6, 10),
    ("pure", 5.0, 1e-9, 200),
    ("gaussian", 1.0, 1e-6, 10),
    ("gaussian", 1.0, 1e-6, 100),
    ("gaussian", 1.0, 1e-6, 1000),
    ("gaussian", 8.0, 1e-10, 30),
    ("bounded_range", 1.0, 1e-6, 50),
    ("bounded_range", 0.5, 1e-6, 20),
    ("bounded_range", 2.0, 1e-9, 1000),
    ("pure", 0.5, 1e-6, 20),
    ("pure", 2.0, 1e-9, 1000),
]


def gaussian_mu(eps, delta):
    """The mu with delta(mu, eps) = delta, by bisection on log mu."""
    eps, delta = mpf(eps), mpf(delta)
    lo, hi = mpf("1e-6"), mpf(1)
    while gaussian_delta(hi, eps) <= delta:
        hi *= 2
    return bisect(lo, hi, lambda mu: gaussian_delta(mu, eps) <= delta, mpf("1e-40"))[0]


def pure_rdp(alpha, eps0):
    """Any eps_0-DP mechanism: randomized response's bound, capped at eps_0."""
    return min(randomized_response_rdp(alpha, eps0), eps0)


def bounded_range_rdp(alpha, eps0):
    """An eps_0-BR mechanism: eps_0-DP, and eps_0^2/8-zCDP."""
    return min(pure_rdp(alpha, eps0), mpf(alpha) * eps0 ** 2 / 8)


def per_step_rdp(eps, delta, steps, rdp):
    """Largest eps_0 with min(RDP conversion of T rdp(., eps_0), T eps_0) <= eps."""
    eps = mpf(eps)

    def cost(eps0):
        curve = [steps * rdp(a, eps0) for a in ORDERS]
        return min(rdp_to_epsilon(curve, delta), steps * eps0)

    return bisect(eps / steps, eps, lambda eps0: cost(eps0) <= eps, mpf("1e-15"))[0]


def per_step_section():
    points = []
    for loss, eps, delta, steps in PER_STEP:
        if loss == "pure":
            eps0 = per_step_rdp(eps, delta, steps, pure_rdp)
        elif loss == "bounded_range":
            eps0 = per_step_rdp(eps, delta, steps, bounded_range_rdp)
        else:
            eps0 = delivered_epsilon(gaussian_mu(eps, delta) / mpmath.sqrt(steps), delta)
        points.append(
            {"loss": loss, "epsilon": eps, "delta": delta, "steps": steps, "per_step": float(eps0)}
        )
    return points


def main():
    reference = {
        "dp_gd": dp_gd_section(),
        "pure_epochs": pure_epochs_section(),
        "per_step": per_step_section(),
        "generated_with": {
            "python": platform.python_version(),
            "mpmath": mpmath.__version__,
        },
    }
    OUT_PATH.write_text(json.dumps(reference, indent=1) + "\n")


if __name__ == "__main__":
    main()
