#!/usr/bin/env python3
"""Independent reference values for dpgate's privacy math.

What it computes (written to ``reference.json`` next to this script):

* ``orders``               -- the fixed grid of Renyi orders alpha.
* ``analytic_gaussian``    -- smallest sigma of the analytic Gaussian mechanism
                              (Balle & Wang 2018, Thm 8), by bisection on log(sigma).
* ``classic_gaussian``     -- sigma = D*sqrt(2 ln(1.25/delta))/eps
                              (Dwork & Roth 2014, Thm A.1), same points.
* ``gaussian_epsilon``     -- exact (eps, delta) curve of a Gaussian with
                              mu = D/sigma (Balle & Wang 2018, Thm 8), by bisection on eps.
* ``rdp_to_epsilon``       -- improved RDP -> (eps, delta) conversion
                              (Canonne, Kamath & Steinke 2020, Prop. 12;
                              Balle et al. 2020, Thm 21) for several RDP curves.
* ``laplace_rdp``          -- Renyi divergence of Lap(0,b) vs Lap(D,b) by numeric
                              integration (tanh-sinh quadrature), checked against
                              Mironov 2017, Prop. 6.
* ``discrete_laplace_rdp`` -- Renyi divergence of shifted discrete Laplace laws by
                              direct term-by-term summation over the integers.
* ``pure_dp_rdp``          -- Renyi divergence of eps-randomized response
                              (Mironov 2017, Prop. 5 setting).
* ``dp_accounting``        -- epsilons from Google's ``dp_accounting`` RdpAccountant,
                              cross-checked against this script's own conversion.
* ``generated_with``       -- Python / mpmath / dp_accounting versions.

Independence from the Rust code: nothing here mirrors dpgate's algorithms.
Sigma and epsilon are found by plain bisection in 50-digit arithmetic (mpmath,
mp.dps = 50) rather than by closed forms or float root finders; the Laplace RDP
comes from numeric integration of p^a q^(1-a) rather than its closed form; the
discrete Laplace RDP comes from direct summation of P(y)^a Q(y)^(1-a), term by
term (each term an independent exp(); the tails are summed directly, not as
closed geometric series) until the geometric bound on the remaining tail is
below 1e-40 of the running sum. Only the ``dp_accounting`` section uses double
precision (it is Google's implementation, used as an outside cross-check).

Inputs such as delta = 1e-5 are converted from the IEEE double the Rust code
would see (mpf(1e-5)), not from the decimal string.

Run (from the repository root, or from anywhere):

    python3 src/dp/testdata/make_reference.py

Generated with Python 3.11.7, mpmath 1.3.0 (pure-Python backend), dp-accounting
0.6.0; the exact versions of each run are stored under "generated_with".
The script is deterministic and takes well under a minute.
"""

import importlib.metadata
import json
import platform
from pathlib import Path

import mpmath
from mpmath import mp, mpf

mp.dps = 50

OUT_PATH = Path(__file__).resolve().parent / "reference.json"

# (eps, delta, sensitivity) points for the analytic / classic Gaussian sections.
GAUSSIAN_POINTS = [
    (1, 1e-5, 1), (0.1, 1e-6, 1), (0.1, 1e-9, 1), (1, 1e-6, 1), (1, 1e-9, 1),
    (5, 1e-6, 1), (5, 1e-9, 1), (0.5, 1e-9, 2.5), (50, 1e-12, 1), (0.01, 1e-5, 1),
    (10, 1e-3, 0.3), (1, 0.5, 1), (2, 1e-12, 1e-6), (0.001, 1e-10, 1),
    (0.1, 1e-7, 1), (20, 1e-12, 3.0),
]
# The single Gaussian release that is composed 100 times in the "100_releases" cases.
SIGMA_1_POINT = (0.1, 1e-7, 1)


def build_orders():
    """The fixed Renyi order grid, increasing, as floats (125 orders)."""
    orders = [1 + x / 8 for x in range(2, 33)]
    orders += [x / 2 for x in range(11, 25)]
    orders += [float(x) for x in range(13, 33)]
    orders += [float(x) for x in range(34, 65, 2)]
    orders += [float(x) for x in range(68, 129, 4)]
    orders += [float(x) for x in range(136, 257, 8)]
    orders += [320.0, 384.0, 448.0, 512.0, 640.0, 768.0, 1024.0, 1536.0,
               2048.0, 4096.0, 8192.0, 16384.0]
    assert all(a < b for a, b in zip(orders, orders[1:]))
    return orders


ORDERS = build_orders()


# ---------------------------------------------------------------- Gaussian (eps, delta)

def gaussian_delta(mu, eps):
    """Exact delta(eps) of a Gaussian mechanism with mu = D/sigma.

    Balle & Wang 2018, "Improving the Gaussian Mechanism for Differential
    Privacy", Thm 8: delta = Phi(mu/2 - eps/mu) - e^eps * Phi(-mu/2 - eps/mu).
    """
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def analytic_gaussian_sigma(eps, delta, sens):
    """Smallest sigma with gaussian_delta(D/sigma, eps) <= delta (Balle & Wang 2018, Thm 8).

    In terms of sigma the Thm 8 expression reads
    Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D), which
    decreases in sigma; bisection on log(sigma) to a log-width (relative width)
    below 1e-30. Returns the upper (feasible) end of the final bracket.
    """
    eps, delta, sens = mpf(eps), mpf(delta), mpf(sens)

    def feasible(log_sigma):
        return gaussian_delta(sens / mpmath.exp(log_sigma), eps) <= delta

    lo = hi = mpmath.log(sens)
    while not feasible(hi):
        hi += 1
    while feasible(lo):
        lo -= 1
    while hi - lo >= mpf("1e-30"):
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return mpmath.exp(hi)


def classic_gaussian_sigma(eps, delta, sens):
    """Classic calibration sigma = D sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth 2014, Thm A.1)."""
    eps, delta, sens = mpf(eps), mpf(delta), mpf(sens)
    return sens * mpmath.sqrt(2 * mpmath.log(mpf("1.25") / delta)) / eps


def gaussian_epsilon(mu, delta):
    """Smallest eps >= 0 with gaussian_delta(mu, eps) <= delta (Balle & Wang 2018, Thm 8).

    gaussian_delta is decreasing in eps; returns 0 if eps = 0 already suffices,
    otherwise bisects to absolute width below 1e-25 and returns the feasible end.
    """
    mu, delta = mpf(mu), mpf(delta)
    if gaussian_delta(mu, 0) <= delta:
        return mpf(0)
    lo, hi = mpf(0), mpf(1)
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo >= mpf("1e-25"):
        mid = (lo + hi) / 2
        if gaussian_delta(mu, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------- RDP curves

def gaussian_rdp(alpha, mu2):
    """RDP of the Gaussian mechanism: alpha * mu^2 / 2 (Mironov 2017, Prop. 7)."""
    return mpf(alpha) * mpf(mu2) / 2


def laplace_rdp_closed_form(alpha, eps):
    """Laplace RDP, Mironov 2017 "Renyi Differential Privacy", Prop. 6 (eps = D/b):

    1/(a-1) ln( a/(2a-1) e^{(a-1) eps} + (a-1)/(2a-1) e^{-a eps} ).
    """
    a, eps = mpf(alpha), mpf(eps)
    inner = (a / (2 * a - 1) * mpmath.exp((a - 1) * eps)
             + (a - 1) / (2 * a - 1) * mpmath.exp(-a * eps))
    return mpmath.log(inner) / (a - 1)


def laplace_pdf(x, loc, b):
    """Density of Lap(loc, b): exp(-|x - loc|/b) / (2b)."""
    return mpmath.exp(-abs(x - loc) / b) / (2 * b)


def geometric_points(start, end, step):
    """start, start+step, start+2 step, start+4 step, ... capped at end (quadrature breakpoints)."""
    points, width = [start], step
    while start + width < end:
        points.append(start + width)
        width *= 2
    points.append(end)
    return points


def laplace_rdp_numeric(alpha, eps):
    """Renyi divergence D_a(Lap(0,b) || Lap(D,b)), D = 1, b = 1/eps, by numeric integration.

    Definition (Mironov 2017, Def. 3): 1/(a-1) ln int p(x)^a q(x)^(1-a) dx,
    integrated with mpmath tanh-sinh quadrature split at the kinks 0 and D.
    On (0, D) the integrand decays like exp(-(2a-1) x/b), so that piece is
    further split at geometrically spaced points starting at b/(2a-1); the
    tails are split one scale b away from the kinks.
    """
    a, sens = mpf(alpha), mpf(1)
    b = sens / mpf(eps)

    def integrand(x):
        return laplace_pdf(x, 0, b) ** a * laplace_pdf(x, sens, b) ** (1 - a)

    points = ([-mpmath.inf, -b]
              + geometric_points(mpf(0), sens, b / (2 * a - 1))
              + [sens + b, mpmath.inf])
    return mpmath.log(mpmath.quad(integrand, points)) / (a - 1)


def discrete_laplace_rdp(alpha, scale, shift):
    """Renyi divergence of P(y) = (1-r)/(1+r) r^|y| (r = e^{-1/scale}) vs Q(y) = P(y - shift).

    Direct summation of P(y)^a Q(y)^(1-a) over the integers (Mironov 2017,
    Def. 3), each term computed as exp(a ln P(y) + (1-a) ln Q(y)) with the
    exact normaliser (1-r)/(1+r). The block between 0 and shift is summed in
    full; then both tails are summed outward term by term. Outside that block
    consecutive terms have ratio exactly r, so the remainder after a term t is
    t r/(1-r); summation stops once that bound is below 1e-40 of the sum.
    """
    a, scale, shift = mpf(alpha), mpf(scale), int(shift)
    r = mpmath.exp(-1 / scale)
    log_norm = mpmath.log((1 - r) / (1 + r))

    def term(y):
        log_p = log_norm - abs(y) / scale
        log_q = log_norm - abs(y - shift) / scale
        return mpmath.exp(a * log_p + (1 - a) * log_q)

    lo, hi = min(0, shift), max(0, shift)
    total = mpmath.fsum(term(y) for y in range(lo, hi + 1))
    tail_factor = r / (1 - r)
    tol = mpf("1e-40")
    for y, step in ((hi, 1), (lo, -1)):
        while True:
            y += step
            t = term(y)
            total += t
            if t * tail_factor < tol * total:
                break
    return mpmath.log(total) / (a - 1)


def randomized_response_rdp(alpha, eps):
    """Renyi divergence of eps-randomized response, P = (p, 1-p), Q = (1-p, p), p = e^eps/(1+e^eps).

    1/(a-1) ln( p^a (1-p)^(1-a) + (1-p)^a p^(1-a) ) (Mironov 2017, Prop. 5
    setting); 1-p is computed as 1/(1+e^eps) to avoid cancellation.
    """
    a, eps = mpf(alpha), mpf(eps)
    p = mpmath.exp(eps) / (1 + mpmath.exp(eps))
    q = 1 / (1 + mpmath.exp(eps))
    return mpmath.log(p ** a * q ** (1 - a) + q ** a * p ** (1 - a)) / (a - 1)


def rdp_to_epsilon(rdp, delta):
    """Improved RDP -> (eps, delta) conversion, minimised over ORDERS.

    eps = min_a max(0, rdp(a) + ln((a-1)/a) - (ln delta + ln a)/(a-1))
    (Canonne, Kamath & Steinke 2020, Prop. 12; Balle et al. 2020, Thm 21).
    """
    delta = mpf(delta)
    candidates = []
    for alpha, value in zip(ORDERS, rdp):
        a = mpf(alpha)
        candidates.append(max(mpf(0), value + mpmath.log((a - 1) / a)
                              - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)))
    return min(candidates)


# ---------------------------------------------------------------- sections

def analytic_gaussian_section():
    """Analytic (Balle & Wang) sigmas for GAUSSIAN_POINTS."""
    return [{"epsilon": float(e), "delta": float(d), "sensitivity": float(s),
             "sigma": float(analytic_gaussian_sigma(e, d, s))}
            for e, d, s in GAUSSIAN_POINTS]


def classic_gaussian_section():
    """Classic (Dwork & Roth) sigmas for GAUSSIAN_POINTS."""
    return [{"epsilon": float(e), "delta": float(d), "sensitivity": float(s),
             "sigma": float(classic_gaussian_sigma(e, d, s))}
            for e, d, s in GAUSSIAN_POINTS]


def gaussian_epsilon_section(sigma_1):
    """Exact Gaussian epsilons on the mu x delta grid plus the 100-release point."""
    rows = [{"mu": mu, "delta": delta, "epsilon": float(gaussian_epsilon(mu, delta))}
            for mu in (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
            for delta in (1e-5, 1e-9, 1e-12)]
    mu_100 = 10 / sigma_1  # sqrt(100) * (1 / sigma_1): 100 Gaussians compose to one Gaussian
    rows.append({"name": "100_releases", "mu": float(mu_100), "delta": 1e-5,
                 "epsilon": float(gaussian_epsilon(mu_100, mpf(1e-5)))})
    return rows


def rdp_to_epsilon_section(sigma_1):
    """RDP curves on ORDERS and their converted epsilons."""
    mu1_sq = 1 / sigma_1 ** 2
    cases = [
        ("gaussian_mu2_0.01", lambda a: gaussian_rdp(a, 0.01), 1e-5),
        ("gaussian_mu2_1", lambda a: gaussian_rdp(a, 1), 1e-6),
        ("gaussian_mu2_25", lambda a: gaussian_rdp(a, 25), 1e-9),
        ("100_releases_rdp", lambda a: 100 * gaussian_rdp(a, mu1_sq), 1e-5),
        ("laplace_eps1_x10", lambda a: 10 * laplace_rdp_closed_form(a, 1), 1e-6),
        ("mixed", lambda a: 5 * gaussian_rdp(a, 0.04) + 3 * randomized_response_rdp(a, 0.5), 1e-6),
    ]
    rows = []
    for name, curve, delta in cases:
        rdp = [curve(a) for a in ORDERS]
        rows.append({"name": name, "rdp": [float(v) for v in rdp], "delta": delta,
                     "epsilon": float(rdp_to_epsilon(rdp, delta))})
    return rows


def laplace_rdp_section():
    """Numerically integrated Laplace RDP, asserted equal to Mironov Prop. 6 to 1e-20 relative."""
    rows = []
    for alpha in (1.25, 2.0, 10.0, 64.0, 1024.0):
        for eps in (0.1, 1.0, 5.0):
            numeric = laplace_rdp_numeric(alpha, eps)
            closed = laplace_rdp_closed_form(alpha, eps)
            assert abs(numeric - closed) <= mpf("1e-20") * abs(closed), (alpha, eps, numeric, closed)
            rows.append({"alpha": alpha, "epsilon": eps, "rdp": float(numeric),
                         "closed_form": float(closed)})
    return rows


def discrete_laplace_rdp_section():
    """Discrete Laplace RDP by direct summation."""
    return [{"alpha": alpha, "scale": float(scale), "shift": shift,
             "rdp": float(discrete_laplace_rdp(alpha, scale, shift))}
            for scale, shift in ((1, 1), (3, 1), (3, 5), (10, 7), (50, 50), (400, 100))
            for alpha in (1.25, 2.0, 10.0, 64.0)]


def pure_dp_rdp_section():
    """Randomized-response RDP."""
    return [{"alpha": alpha, "epsilon": eps, "rdp": float(randomized_response_rdp(alpha, eps))}
            for alpha in (1.25, 2.0, 10.0, 256.0, 16384.0)
            for eps in (0.1, 1.0, 5.0, 50.0)]


def dp_accounting_section():
    """Epsilons from dp_accounting's RdpAccountant on ORDERS (double precision).

    Imported here, so that other scripts can import this module's exact
    functions without dp_accounting installed.

    Each value is also checked against rdp_to_epsilon applied to this script's
    own RDP curve for the same event (agreement to 1e-9 relative).
    """
    import dp_accounting  # pylint: disable=import-outside-toplevel

    cases = [
        ("gaussian_nm1_x1", "Gaussian noise_multiplier=1.0 composed 1x",
         dp_accounting.GaussianDpEvent(1.0), 1, 1e-5,
         lambda a: gaussian_rdp(a, 1)),
        ("gaussian_nm4_x50", "Gaussian noise_multiplier=4.0 composed 50x",
         dp_accounting.GaussianDpEvent(4.0), 50, 1e-6,
         lambda a: 50 * gaussian_rdp(a, mpf(1) / 16)),
        ("laplace_nm2_x10", "Laplace noise_multiplier b/D=2.0 composed 10x",
         dp_accounting.LaplaceDpEvent(2.0), 10, 1e-6,
         lambda a: 10 * laplace_rdp_closed_form(a, mpf(1) / 2)),
    ]
    rows = []
    for name, event_text, event, count, delta, own_curve in cases:
        accountant = dp_accounting.rdp.RdpAccountant(orders=ORDERS)
        accountant.compose(dp_accounting.SelfComposedDpEvent(event, count))
        epsilon = accountant.get_epsilon(delta)
        own = rdp_to_epsilon([own_curve(a) for a in ORDERS], delta)
        assert abs(epsilon - own) <= 1e-9 * own, (name, epsilon, own)
        rows.append({"name": name, "event": event_text, "delta": delta, "epsilon": float(epsilon)})
    return rows


def generated_with():
    """Versions of the interpreter and packages used."""
    return {"python": platform.python_version(),
            "mpmath": mpmath.__version__,
            "dp_accounting": importlib.metadata.version("dp-accounting")}


def check_sanity(ref):
    """Cross-section sanity assertions; any failure aborts before reference.json is written."""
    for analytic, classic in zip(ref["analytic_gaussian"], ref["classic_gaussian"]):
        if analytic["epsilon"] < 1:
            assert analytic["sigma"] < classic["sigma"], (analytic, classic)
    first = ref["analytic_gaussian"][0]
    assert (first["epsilon"], first["delta"], first["sensitivity"]) == (1.0, 1e-5, 1.0)
    assert abs(first["sigma"] - 3.73) < 0.01, first

    grid = {(row["mu"], row["delta"]): row["epsilon"]
            for row in ref["gaussian_epsilon"] if "name" not in row}
    for mu in {mu for mu, _ in grid}:
        e12, e9, e5 = grid[(mu, 1e-12)], grid[(mu, 1e-9)], grid[(mu, 1e-5)]
        assert e12 >= e9 >= e5 and (e9 == 0 or e12 > e9) and (e5 == 0 or e9 > e5), (mu, e12, e9, e5)

    exact_100 = next(r for r in ref["gaussian_epsilon"] if r.get("name") == "100_releases")
    rdp_100 = next(r for r in ref["rdp_to_epsilon"] if r["name"] == "100_releases_rdp")
    assert rdp_100["epsilon"] >= exact_100["epsilon"], (rdp_100["epsilon"], exact_100["epsilon"])
    assert all(len(r["rdp"]) == len(ref["orders"]) for r in ref["rdp_to_epsilon"])


def main():
    """Compute every section, run the sanity checks and write reference.json."""
    sigma_1 = analytic_gaussian_sigma(*SIGMA_1_POINT)
    ref = {
        "orders": ORDERS,
        "analytic_gaussian": analytic_gaussian_section(),
        "classic_gaussian": classic_gaussian_section(),
        "gaussian_epsilon": gaussian_epsilon_section(sigma_1),
        "rdp_to_epsilon": rdp_to_epsilon_section(sigma_1),
        "laplace_rdp": laplace_rdp_section(),
        "discrete_laplace_rdp": discrete_laplace_rdp_section(),
        "pure_dp_rdp": pure_dp_rdp_section(),
        "dp_accounting": dp_accounting_section(),
        "generated_with": generated_with(),
    }
    check_sanity(ref)
    OUT_PATH.write_text(json.dumps(ref, indent=1) + "\n")
    print(f"wrote {OUT_PATH}")


if __name__ == "__main__":
    main()
